"""A discrete-event simulator of LLM serving instances with continuous batching, calibrated by the
tier profiles, for evaluating routing policies (001, 000, 004, 002) without GPUs."""

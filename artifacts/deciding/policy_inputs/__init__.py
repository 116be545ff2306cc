"""What a learned routing policy's network takes at a decision and how its output becomes an instance:
one module per kind of observation (`base.POLICY_INPUTS`), holding the function that builds it, which
the policy's training environment and the runtime's `Dispatcher` both call."""

"""How a tier's latency is measured or imported, one module per `tiers[].profile.kind`.

Each module registers its measuring function in `core.kinds.PROFILE_KINDS`:
`measure(config, tier, routing_table, folder, log) -> summary` writes what was measured to `folder`
and returns the fields `profile.json` adds to the tier's summary (`tier`, `kind`, `profile_key`).
Metadata, which `config validate` reads without running anything:

- `needs`: the profile's fields the kind cannot do without (`file`, `key`; `logs`);
- `exclusive`: pairs of fields the kind refuses together (a sweep's `serve` and `base_url`);
- `key_inputs(profile) -> list`: what besides the settings decides the measurement (a traffic log's
  files and sizes: new logs, new measurements), for `tier_profile.profile_key`.

A new kind is one module here (or one named by `$ROUTEFORGE_EXTENSIONS`); `build_latency_component`
trains heads from whichever files the summary names (static batches, a prior, request records).
"""

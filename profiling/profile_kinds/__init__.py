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

from __future__ import annotations

import difflib


def published_entry(tier, read):
    """The tier's `key` in its profile's file of published measurements (`read(file) -> {key: …}`),
    or an error naming the key and what the file has."""
    profile = tier.profile
    entries = read(profile.file)
    if profile.key not in entries:
        close = difflib.get_close_matches(profile.key, list(entries), n=3)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise ValueError(f"tiers[{tier.name}].profile.key: {profile.key!r} not in {profile.file} "
                         f"({hint}{len(entries)} keys there)")
    return entries[profile.key]


"""How a tier's latency is measured or imported, one module per `tiers[].profile.kind`.

Each module registers its measuring function in `core.kinds.PROFILE_KINDS`:
`measure(config, tier, routing_table, folder, log) -> result` writes what was measured to `folder`
and returns one of `profiling.profile_results`' types (measured batches, a fitted prior, sweep or
traffic records), which `profile.json` carries with the tier, kind and key (`TierProfile`).
Metadata, which `config validate` reads without running anything:

- `needs`: the profile's fields the kind cannot do without (`file`, `key`; `logs`);
- `exclusive`: pairs of fields the kind refuses together (a sweep's `serve` and `base_url`);
- `key_inputs(profile) -> list`: what besides the settings decides the measurement (a traffic log's
  files and sizes: new logs, new measurements), for `tier_profile.profile_key`;
- `check(profile) -> list[str]`: what is wrong with the files the profile names, read as the run
  will read them (a published file's `key`), so `config validate` refuses what the profiling stage
  would, instead of the run failing there after the prompts, the responses and the scores.

A new kind is one module here (or one named by `$ROUTEFORGE_EXTENSIONS`) returning one of those
types; `build_latency_component` and the assets dispatch on the type.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from pathlib import Path

from routeforge.core.config.data_columns import _stamp  # the file-version key validate's caches use


def _missing_key(profile, entries) -> str | None:
    """'KEY not in FILE (did you mean …? N keys there)', or None where the file has the key."""
    if profile.key in entries:
        return None
    close = difflib.get_close_matches(profile.key, list(entries), n=3)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    return f"{profile.key!r} not in {profile.file} ({hint}{len(entries)} keys there)"


def published_entry(tier, read):
    """The tier's `key` in its profile's file of published measurements (`read(file) -> {key: …}`),
    or an error naming the key and what the file has."""
    entries = read(tier.profile.file)
    missing = _missing_key(tier.profile, entries)
    if missing:
        raise ValueError(f"tiers[{tier.name}].profile.key: {missing}")
    return entries[tier.profile.key]


def published_key_check(read: Callable[[Path], dict]) -> Callable[[object], list[str]]:
    """The `check` of a kind that reads published measurements: the file parses as `read` parses it
    and holds the profile's `key` (a file is read once per version however many tiers name it)."""

    @functools.lru_cache(maxsize=8)
    def keys(stamp: tuple[str, int, int]) -> frozenset[str] | str:
        try:
            return frozenset(read(Path(stamp[0])))
        except (OSError, ValueError) as exc:
            return str(exc)

    def check(profile) -> list[str]:
        stamp = _stamp(Path(profile.file))
        if stamp is None:
            return []  # a missing file is said by `files.missing_files`, with its field
        entries = keys(stamp)
        if isinstance(entries, str):
            return [f"file: {entries}"]
        missing = _missing_key(profile, entries)
        return [f"key: {missing}"] if missing else []

    return check


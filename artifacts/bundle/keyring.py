"""Pinned public keys: the keys a router service trusts, held where the service is, never read from
the store it downloads bundles from.

Why: a signature protects a bundle only against writers who cannot also choose the key it is checked
with. The registered model's tag `routeforge.public_key` is written by whoever can write the store,
the very writer a signature is meant to stop, so it is at most a hint: it may name the key, and it
may be pinned on first use when the user says so (`routeforge keys pin models:/…`, or
`$ROUTEFORGE_TRUST_ON_FIRST_USE=1` with nothing pinned yet), as SSH's known-hosts file is. A bundle
verifies only with the pinned key whose id its `manifest.sig` names.

Where pinned keys are (`load_keyring`, first found wins):
1. the key or folder given to the call (`public_key=`, `--public-key`): only those;
2. `$ROUTEFORGE_PUBLIC_KEY` (a PEM file, or a folder of them): only those;
3. the keyring folders: `$ROUTEFORGE_KEYRING`, else `$XDG_CONFIG_HOME/routeforge/keyring`
   (`~/.config/routeforge/keyring`), together with `/etc/routeforge/keyring` when it exists.

A keyring folder holds `<key id>.pub` files (PEM SubjectPublicKeyInfo). The pipeline pins the
public half of the key it signs with (it holds the private key, so that trust comes from this
machine); `routeforge keys rotate` pins the new key and keeps the old one, so versions signed by a
retired key still verify until it is unpinned (`routeforge keys unpin ID`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from routeforge.artifacts.bundle.plain_files import NotPlainFile, read_plain
from routeforge.artifacts.bundle.signing import key_id, load_public_key

KEYRING_ENV = "ROUTEFORGE_KEYRING"
PUBLIC_KEY_ENV = "ROUTEFORGE_PUBLIC_KEY"
TOFU_ENV = "ROUTEFORGE_TRUST_ON_FIRST_USE"
SYSTEM_KEYRING = Path("/etc/routeforge/keyring")
MAX_KEY_BYTES = 16 << 10  # a PEM public key is about 113 bytes


def user_keyring() -> Path:
    """The folder keys are pinned into: `$ROUTEFORGE_KEYRING`, else the user's configuration folder."""
    if os.environ.get(KEYRING_ENV):
        return Path(os.environ[KEYRING_ENV])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "routeforge" / "keyring"


@dataclass(frozen=True)
class Keyring:
    """Public keys (PEM bytes) by key id, and the places they were read from (said in refusals)."""

    keys: dict[str, bytes] = field(default_factory=dict)
    places: tuple[str, ...] = ()

    def get(self, kid: str | None) -> bytes | None:
        return self.keys.get(kid) if isinstance(kid, str) else None

    def __bool__(self) -> bool:
        return bool(self.keys)

    def describe(self) -> str:
        where = ", ".join(self.places) or "nowhere"
        if not self.keys:
            return f"no key is pinned ({where})"
        return f"pinned: {', '.join(sorted(self.keys))} from {where}"


def _read_key(path: Path) -> tuple[str, bytes]:
    try:
        pem = read_plain(path, MAX_KEY_BYTES)
    except NotPlainFile as exc:
        raise ValueError(str(exc)) from None
    try:
        return key_id(load_public_key(pem)), pem
    except ValueError as exc:
        raise ValueError(f"{path}: {str(exc).split(': ', 1)[-1]}") from None


def _from_place(place: Path, keys: dict[str, bytes], strict: bool) -> None:
    """Add the key at `place` (a file) or every `*.pub` in it (a folder). A stray file in a folder is
    said and skipped (one must not stop every verification); a file named directly must be a key."""
    if place.is_dir():
        for path in sorted(place.glob("*.pub")):
            try:
                kid, pem = _read_key(path)
            except ValueError as exc:
                print(f"routeforge: {exc}; not trusted", file=sys.stderr)
                continue
            keys[kid] = pem
    elif place.exists() or strict:
        kid, pem = _read_key(place)
        keys[kid] = pem


def load_keyring(source: Path | str | bytes | Keyring | None = None) -> Keyring:
    """The pinned keys (see the module docstring for the order). `source` may be PEM bytes, a PEM
    file, a folder of them, or a `Keyring` (returned as it is)."""
    if isinstance(source, Keyring):
        return source
    if isinstance(source, bytes):
        return Keyring({key_id(load_public_key(source)): source}, ("the key given",))
    keys: dict[str, bytes] = {}
    if source:
        _from_place(Path(source), keys, strict=True)
        return Keyring(keys, (str(source),))
    if os.environ.get(PUBLIC_KEY_ENV):
        place = Path(os.environ[PUBLIC_KEY_ENV])
        _from_place(place, keys, strict=True)
        return Keyring(keys, (f"${PUBLIC_KEY_ENV} ({place})",))
    places = [user_keyring(), SYSTEM_KEYRING]
    for place in places:
        _from_place(place, keys, strict=False)
    return Keyring(keys, tuple(str(p) for p in places if p.exists() or p == places[0]))


def pin(pem: bytes, folder: Path | None = None) -> tuple[str, Path, bool]:
    """Pin the public key `pem` in `folder` (the user keyring by default) as `<key id>.pub`, written
    atomically. Returns (key id, path, whether it was new)."""
    kid = key_id(load_public_key(pem))
    folder = Path(folder) if folder is not None else user_keyring()
    path = folder / f"{kid}.pub"
    if path.is_file() and not path.is_symlink():
        return kid, path, False
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{kid}.{os.getpid()}.tmp"
    tmp.write_bytes(pem)
    tmp.replace(path)
    return kid, path, True


def unpin(kid: str, folder: Path | None = None) -> Path:
    """Remove the pinned key `kid` from `folder` (the user keyring); KeyError when it is not there."""
    folder = Path(folder) if folder is not None else user_keyring()
    for path in sorted(folder.glob("*.pub")):
        try:
            if _read_key(path)[0] == kid:
                path.unlink()
                return path
        except ValueError:
            continue
    raise KeyError(f"no key {kid} is pinned in {folder}")


def trust_on_first_use_allowed() -> bool:
    return os.environ.get(TOFU_ENV) == "1"

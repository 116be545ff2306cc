"""Ed25519 signatures over a bundle's manifest, so that a bundle rewritten consistently (files and
their checksums together) by anyone who can write to the artifact store no longer verifies.

The manifest lists every file with its sha256; signing the manifest's exact bytes therefore covers
every file. The signature lives beside it as `manifest.sig`, a small JSON document any runtime can
check with any Ed25519 library: `{"algorithm": "ed25519", "key_id": ..., "signature": base64}`,
where `key_id` is the first 16 hex digits of the sha256 of the raw 32-byte public key (it names the
key; it proves nothing). Keys are PEM files (PKCS #8 private, SubjectPublicKeyInfo public), the
public one beside the private one as `<name>.pub`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from routeforge.artifacts.bundle.manifest import MANIFEST_FILE

SIGNATURE_FILE = "manifest.sig"
ALGORITHM = "ed25519"


def public_key_path(private_key: Path) -> Path:
    return Path(f"{private_key}.pub")


def generate_key_pair(private_key: Path) -> Path:
    """Write a new key pair: `private_key` readable by its owner only (created 0600, never widened
    afterwards), the public key beside it as `<private_key>.pub`. Returns the public key's path.
    Refuses to overwrite an existing private key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_key = Path(private_key)
    private_key.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = public_key_path(private_key)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return public


def _load_private(path: Path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not an unencrypted PEM private key ({exc})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: a {type(key).__name__}, not an Ed25519 private key")
    return key


def load_public_key(source: Path | bytes):
    """An Ed25519 public key from a PEM file, or from PEM bytes (a key recorded in the registry)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    where = "the public key given" if isinstance(source, bytes) else str(source)
    try:
        key = serialization.load_pem_public_key(source if isinstance(source, bytes) else Path(source).read_bytes())
    except (ValueError, TypeError, OSError) as exc:
        raise ValueError(f"{where}: not a PEM public key ({exc})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{where}: a {type(key).__name__}, not an Ed25519 public key")
    return key


def public_key_pem(private_key: Path) -> str:
    """The PEM of the public half of the private key at `private_key` (recorded in the registry)."""
    from cryptography.hazmat.primitives import serialization

    return _load_private(private_key).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_id(public_key) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign_bytes(data: bytes, private_key: Path) -> tuple[str, str]:
    """(the signature document of `data` in `manifest.sig`'s format, the key id): what a bundle's
    manifest and a registered version's model record (`artifacts.bundle.model_record`) are signed with."""
    key = _load_private(private_key)
    kid = key_id(key.public_key())
    doc = {"algorithm": ALGORITHM, "key_id": kid, "signature": base64.b64encode(key.sign(data)).decode()}
    return json.dumps(doc, indent=2), kid


def sign_bundle(root: Path, private_key: Path) -> str:
    """Sign `root`'s manifest with the key at `private_key`; writes `manifest.sig`, returns the key id."""
    doc, kid = sign_bytes((Path(root) / MANIFEST_FILE).read_bytes(), private_key)
    (Path(root) / SIGNATURE_FILE).write_text(doc)
    return kid


RETIRED_FOLDER = "retired"  # beside the public key: the public keys of rotated-out signing keys


def trusted_keys(public_key: Path) -> dict[str, Path]:
    """The public key at `public_key` and every retired one in `<its folder>/retired/*.pub`, by key
    id. After a rotation, a version signed by the old key is verified with the old public key, the
    one its signature names; the store only says which of these keys to use, never adds one."""
    import sys

    public_key = Path(public_key)
    keys: dict[str, Path] = {}
    for path in sorted((public_key.parent / RETIRED_FOLDER).glob("*.pub")):
        try:
            keys[key_id(load_public_key(path))] = path
        except ValueError as exc:  # one stray file must not stop every verification: said, not trusted
            print(f"routeforge: {exc}; not trusted", file=sys.stderr)
    if public_key.is_file():
        keys[key_id(load_public_key(public_key))] = public_key
    return keys


def key_for(public_key: Path | bytes | None, kid: str | None) -> Path | bytes | None:
    """The trusted key to verify a version signed by key `kid` with: the retired one of that id when
    there is one beside `public_key`, else `public_key` itself (which then names the mismatch)."""
    if isinstance(public_key, (str, Path)) and kid:
        return trusted_keys(Path(public_key)).get(kid, Path(public_key))
    return public_key


def rotate_key(private_key: Path, retire_public: list[Path] = ()) -> tuple[list[str], Path]:
    """A new key pair at `private_key`, after moving the old public key (and each of `retire_public`,
    say a lost key's public half from a backup) to `retired/<key id>.pub`, so the versions they
    signed still verify. The old private key is deleted: a retired key must not sign again.
    Returns (the retired key ids, the new public key's path)."""
    private_key = Path(private_key)
    folder = public_key_path(private_key).parent / RETIRED_FOLDER
    retired = [Path(p) for p in retire_public]
    if public_key_path(private_key).is_file():
        retired.append(public_key_path(private_key))
    ids = []
    folder.mkdir(parents=True, exist_ok=True)
    for path in retired:
        kid = key_id(load_public_key(path))
        (folder / f"{kid}.pub").write_bytes(Path(path).read_bytes())
        ids.append(kid)
    if private_key.exists():
        private_key.unlink()
    public_key_path(private_key).unlink(missing_ok=True)
    return ids, generate_key_pair(private_key)

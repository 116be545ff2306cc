"""Trusting a bundle: its manifest read once as a plain file, its signature checked on those very bytes
by a pinned key, every path it names confined to its component's folder, every file hashed.

Nothing of a bundle is used before it passes here (`verify_bundle`): the manifest validates against
the JSON Schema, its schema version is one this runtime reads, and every listed file matches its
sha256 (no file missing, none unlisted). `manifest.json` and `manifest.sig` are each read once, as
plain files (no link, no special file: `plain_files`); the signature is checked on those bytes before
anything else is done with the bundle, and the manifest is parsed from the same bytes. Which keys
are trusted is the keyring's (`keyring`), never the store's (`resolve_key`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from importlib import resources
from pathlib import Path, PurePosixPath, PureWindowsPath

from routeforge.artifacts.bundle.keyring import (
    PUBLIC_KEY_ENV,
    Keyring,
    load_keyring,
    pin,
    trust_on_first_use_allowed,
    user_keyring,
)
from routeforge.artifacts.bundle.manifest import MANIFEST_FILE, MANIFEST_SCHEMA_VERSION, Manifest
from routeforge.artifacts.bundle.plain_files import NotPlainFile, read_plain, sha256_plain, walk_plain
from routeforge.artifacts.bundle.registry import recorded_public_key
from routeforge.artifacts.bundle.signing import ALGORITHM, SIGNATURE_FILE, load_public_key

SUPPORTED_MAJOR, SUPPORTED_MINOR = MANIFEST_SCHEMA_VERSION.split(".")


def no_key_message() -> str:
    """Why a bundle is refused when no key is pinned, and every way to pin one (never the store's)."""
    return (f"no pinned public key to check its signature with: pass public_key= (--public-key), set "
            f"${PUBLIC_KEY_ENV}, pin the signer's key (`routeforge keys pin KEY.pub`, into {user_keyring()}), or "
            "opt out explicitly with allow_unsigned=True (--insecure-skip-signature)")


class BundleVerificationError(Exception):
    """The bundle is not what its manifest says; the message names every offending file."""


MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists files; no real one comes near this


MAX_SIGNATURE_BYTES = 4096


COMPONENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+=-]*")


def _schema() -> dict:
    return json.loads(resources.files("routeforge.artifacts").joinpath("manifest.schema.json").read_text())


def read_manifest(root: Path) -> Manifest:
    """The manifest of the bundle at `root`, read once as a plain file and validated (no signature
    check: `verified_manifest` for that)."""
    return parse_manifest(_manifest_bytes(Path(root)), Path(root) / MANIFEST_FILE)


def _manifest_bytes(root: Path) -> bytes:
    path = root / MANIFEST_FILE
    try:
        return read_plain(path, MAX_MANIFEST_BYTES)
    except NotPlainFile as exc:
        if not root.exists():
            raise BundleVerificationError(f"{root}: no such folder") from None
        if exc.missing:
            raise BundleVerificationError(f"{root}: no {MANIFEST_FILE}; not a routeforge bundle") from None
        raise BundleVerificationError(str(exc)) from None


SCHEMA_VERSION = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})", re.ASCII)


def parse_schema_version(version) -> tuple[int, int] | None:
    """(major, minor) of a `<major>.<minor>` schema version in canonical ASCII decimal ("1.1"; not
    "01.1", "1.1.0" nor other scripts' digits), else None. The TypeScript runtime's
    `parseSchemaVersion` is held to the same golden cases (tests/artifacts/schema_versions.json)."""
    match = SCHEMA_VERSION.fullmatch(version) if isinstance(version, str) else None
    return (int(match[1]), int(match[2])) if match else None


def parse_manifest(data: bytes, path: Path) -> Manifest:
    """A manifest from its bytes: JSON, a schema version this loader reads, the JSON Schema."""
    import jsonschema

    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BundleVerificationError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise BundleVerificationError(f"{path}: a JSON object is expected")
    version = raw.get("schema_version")
    reads = f"{SUPPORTED_MAJOR}.0 to {MANIFEST_SCHEMA_VERSION}"
    parsed = parse_schema_version(version)
    if parsed is None:
        raise BundleVerificationError(f"{path}: schema_version {version!r} is not a version this loader reads "
                                      f"({reads})")
    if parsed[0] != int(SUPPORTED_MAJOR) or parsed[1] > int(SUPPORTED_MINOR):
        # a newer minor may carry signed claims this loader cannot honour: upgrade, never ignore them
        raise BundleVerificationError(
            f"{path}: schema_version {version} is not readable by this loader (reads {reads}; upgrade routeforge)"
        )
    try:
        jsonschema.validate(raw, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise BundleVerificationError(f"{path}: field {where}: {exc.message}") from exc
    return Manifest.from_dict(raw)


def confinement_problems(manifest: Manifest) -> list[str]:
    """Every component name that is not a plain name, and every file path that could leave its
    component's folder (absolute, `..`, or outside `<component>/`)."""
    problems = []
    for component in manifest.components:
        name = component.name
        if not COMPONENT_NAME.fullmatch(name) or name in (".", ".."):
            problems.append(f"component {name!r}: not a plain name (letters, digits and _ . @ + = -)")
            continue
        for entry in component.files:
            why = _unsafe_path(entry.path)
            if why is None and PurePosixPath(entry.path).parts[0] != name:
                why = f"outside its component's folder {name}/"
            if why is not None:
                problems.append(f"{entry.path}: {why}")
    return problems


def verified_manifest(root: Path, public_key: Path | str | bytes | None = None,
                      allow_unsigned: bool = False) -> Manifest:
    """The bundle's manifest, from one read of `manifest.json`, after its signature was checked on
    those very bytes (one read of `manifest.sig`) and every path it names was found confined. Nothing
    else of the bundle is opened, linked or removed before this returns."""
    root = Path(root)
    data = _manifest_bytes(root)
    key = None if allow_unsigned and not named_key(public_key) else trusted_key(public_key)
    if key is None and not allow_unsigned:
        raise BundleVerificationError(f"bundle at {root} refused: {no_key_message()}")
    if key is None:
        print(f"routeforge: WARNING: the signature of the bundle at {root} was NOT verified "
              "(allow_unsigned / --insecure-skip-signature)", file=sys.stderr)
    else:
        try:
            signature = read_plain(root / SIGNATURE_FILE, MAX_SIGNATURE_BYTES)
        except NotPlainFile as exc:
            if not exc.missing:
                raise BundleVerificationError(f"bundle at {root} refused: {exc}") from None
            signature = None  # said by signature_problem_of: unsigned
        try:
            problem = signature_problem_of(data, signature, key)
        except ValueError as exc:
            raise BundleVerificationError(f"public key: {exc}") from exc
        if problem is not None:
            raise BundleVerificationError(f"bundle at {root} refused: {problem}")
    manifest = parse_manifest(data, root / MANIFEST_FILE)
    unsafe = confinement_problems(manifest)
    if unsafe:
        raise BundleVerificationError(f"bundle at {root} refused: " + "; ".join(unsafe))
    return manifest


def _unsafe_path(rel: str) -> str | None:
    """Why a manifest path could reach outside the bundle folder, or None."""
    parts = PurePosixPath(rel).parts
    if rel.startswith("/") or PureWindowsPath(rel).drive or "\\" in rel:
        return "absolute or not a POSIX relative path"
    if ".." in parts or not parts:
        return "leaves the bundle folder"
    return None


def trusted_key(public_key: Path | str | bytes | Keyring | None) -> Keyring | None:
    """The pinned keys to verify with (`keyring.load_keyring`: the key or folder given, else
    $ROUTEFORGE_PUBLIC_KEY, else the keyring folders), or None when none is pinned. A key given that
    is not a key is an error naming it."""
    try:
        keyring = load_keyring(public_key)
    except ValueError as exc:
        raise BundleVerificationError(f"public key: {exc}") from None
    return keyring or None


def named_key(public_key) -> bool:
    """Whether the caller named a key (given, or `$ROUTEFORGE_PUBLIC_KEY`): opting out of signatures
    skips the keyring folders' keys, never a key named explicitly."""
    return public_key is not None or bool(os.environ.get(PUBLIC_KEY_ENV))


def signer_id(root: Path) -> str | None:
    """The key id `manifest.sig` names (after `verified_manifest` checked it: the pinned key's)."""
    try:
        doc = json.loads(read_plain(Path(root) / SIGNATURE_FILE, MAX_SIGNATURE_BYTES))
    except (NotPlainFile, ValueError):
        return None
    kid = doc.get("key_id") if isinstance(doc, dict) else None
    return kid if isinstance(kid, str) else None


def verify_bundle(root: Path, public_key: Path | str | bytes | None = None, allow_unsigned: bool = False) -> Manifest:
    """Check the signature and every checksum; raise naming each problem.

    First `verified_manifest`: the manifest and its signature read once each, the signature checked
    on those bytes by the trusted key's owner (`public_key`, a PEM path or PEM bytes, else
    $ROUTEFORGE_PUBLIC_KEY), every component name plain and every path confined to its component's
    folder. An unsigned bundle, one signed by another key and one whose files and checksums were
    rewritten together are refused, naming the reason. Without a trusted key the bundle is refused
    too, unless the caller opts out with `allow_unsigned=True`, which is said on standard error (a
    signature proves who made the bundle; checksums alone only that it is whole). Then the folder
    holds plain files and folders only (no symbolic link, device, pipe or socket), each listed file
    hashed through the descriptor that was checked, and nothing unlisted."""
    root = Path(root)
    manifest = verified_manifest(root, public_key, allow_unsigned)
    present, odd = walk_plain(root)
    if odd:
        raise BundleVerificationError(f"bundle at {root} refused: " + "; ".join(odd))
    problems = [p for comp in manifest.components for p in component_problems(root, comp)]
    listed = listed_paths(manifest)
    problems += [f"{rel}: not listed in the manifest" for rel in present
                 if rel not in (MANIFEST_FILE, SIGNATURE_FILE) and rel not in listed]
    if problems:
        raise BundleVerificationError(f"bundle at {root} failed verification: " + "; ".join(problems))
    return manifest


def listed_paths(manifest: Manifest) -> set[str]:
    """Every file path the manifest lists (its components' files)."""
    return {entry.path for component in manifest.components for entry in component.files}


def component_problems(root: Path, component) -> list[str]:
    """Each file of `component` under `root` that is missing, not a plain file, or not what the
    manifest says (size and sha256, read through one descriptor)."""
    problems = []
    for entry in component.files:
        try:
            size, digest = sha256_plain(Path(root) / entry.path)
        except NotPlainFile as exc:
            problems.append(f"{entry.path}: {exc.reason}")
            continue
        if size != entry.bytes or digest != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch")
    return problems


def resolve_key(ref: str | Path, public_key: Path | str | bytes | Keyring | None = None,
                tracking_uri: str | None = None, allow_unsigned: bool = False) -> Keyring | None:
    """The pinned keys a bundle at `ref` is verified with (`trusted_key`); None when none is pinned.
    The registry's recorded key is never trusted by itself: only with nothing pinned, for a
    `models:/` reference, and with $ROUTEFORGE_TRUST_ON_FIRST_USE=1 is it pinned (said on stderr),
    as SSH's known-hosts pins a host's first key."""
    if allow_unsigned and not named_key(public_key):
        return None  # opted out: said by `verified_manifest`
    key = trusted_key(public_key)
    if key is None and str(ref).startswith("models:/") and trust_on_first_use_allowed():
        pem = recorded_public_key(str(ref), tracking_uri)
        if pem is not None:
            kid, path, _ = pin(pem)
            print(f"routeforge: pinned key {kid} from the registry's record for {ref} into {path} (trust on first "
                  f"use, $ROUTEFORGE_TRUST_ON_FIRST_USE=1): compare {kid} with the signer's `routeforge keys list`",
                  file=sys.stderr)
            key = trusted_key(None)
    return key


SIGNATURE_BYTES = 64  # an Ed25519 signature


def signature_problem_of(manifest: bytes, signature_doc: bytes | None, public_key) -> str | None:
    """Why `signature_doc` (the bytes of `manifest.sig`; None: there is none) is not a valid signature
    of exactly these `manifest` bytes by a pinned key, or None when it is. `public_key`: a
    `keyring.Keyring`, or one key (a PEM path or PEM bytes). The signature is checked with the pinned
    key of the id it names; a key that is not pinned is refused naming both. The caller reads each file
    once and parses the manifest from the same bytes it checked here."""
    from cryptography.exceptions import InvalidSignature

    keyring = load_keyring(public_key)
    if signature_doc is None:
        return f"unsigned: no {SIGNATURE_FILE} (a signed bundle was required)"
    try:
        doc = json.loads(signature_doc)
        algorithm, kid, text = doc["algorithm"], doc["key_id"], doc["signature"]
        if not isinstance(text, str) or not isinstance(kid, str):
            raise TypeError("signature or key_id is not a string")
        signature = base64.b64decode(text, validate=True)
    except (ValueError, KeyError, TypeError) as exc:
        return f"{SIGNATURE_FILE}: malformed ({exc})"
    if len(signature) != SIGNATURE_BYTES or base64.b64encode(signature).decode() != text:
        return f"{SIGNATURE_FILE}: malformed (an Ed25519 signature is {SIGNATURE_BYTES} bytes in canonical base64)"
    if algorithm != ALGORITHM:
        return f"{SIGNATURE_FILE}: algorithm {algorithm!r}, expected {ALGORITHM!r}"
    pem = keyring.get(kid)
    if pem is None:
        return (f"signed by another key (key id {kid[:64]!r}, which is not pinned; {keyring.describe()}): "
                "pin the signer's public key with `routeforge keys pin KEY.pub` once you have it from the signer")
    try:
        load_public_key(pem).verify(signature, manifest)
    except InvalidSignature:
        return f"bad signature: {MANIFEST_FILE} was changed after it was signed by key {kid}"
    return None

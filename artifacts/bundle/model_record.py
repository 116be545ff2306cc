"""A signed record of every file of a registered MLflow model that the bundle's own signature does not
cover: `MLmodel`, the environment files, the input examples, the shared-components references.

Why: `mlflow.pyfunc.load_model` and `mlflow models serve` read `MLmodel` first and act on it (its
loader module, a code path, the data folder). Signing only the bundle left those open: an edited
`MLmodel` ran any code while `bundle verify` said OK, and pointing its `data` at another signed bundle
swapped the bundle served. The pipeline signs, right after registering a version, a record of those
files' sha256, bound to the model name, the version number and the bundle's content digest, and
keeps it on the version as the tag `routeforge.model_record`:

    {"record": "<canonical JSON: format, model, version, bundle, files {path: sha256}>",
     "signature": "<manifest.sig's format: algorithm, key_id, base64 signature of the record's bytes>"}

`bundle verify models:/…` checks it with the bundle's key: the signature on the record's exact bytes,
the name and version it names against the reference's, and every file of the model version: each one
outside the bundle's folder must be in the record with its hash, each one recorded must be there.
The bundle's files are checked by the bundle's manifest as always.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath

from routeforge.artifacts.bundle.plain_files import walk_plain
from routeforge.artifacts.bundle.registry import (
    MODEL_DATA_FOLDERS,
    _use_tracking,
    check_version_location,
    download_artifacts,
    registered_version,
)
from routeforge.artifacts.bundle.signing import sign_bytes
from routeforge.artifacts.bundle.verification import listed_paths, signature_problem_of
from routeforge.artifacts.common import temporary

MODEL_RECORD_TAG = "routeforge.model_record"
RECORD_FORMAT = 1
DOWNLOAD_META = "registered_model_meta"  # what `mlflow.artifacts.download_artifacts("models:/…")` adds


class ModelRecordError(ValueError):
    """A registered model whose files are not the ones its record signs; the message says which."""


def _outside_bundle(paths: list[str], listed: set[str]) -> list[str]:
    """The model paths that are not files of its bundle (those the bundle's manifest covers): the
    bundle folder is `<data folder>/<folder>/` holding `manifest.json` (`registry.MODEL_DATA_FOLDERS`)."""
    folder = next((str(PurePosixPath(p).parent) for p in paths if PurePosixPath(p).name == "manifest.json"
                   and str(PurePosixPath(p).parent.parent) in MODEL_DATA_FOLDERS), None)
    if folder is None:
        return list(paths)
    prefix = f"{folder}/"
    return [p for p in paths if not (p.startswith(prefix) and p[len(prefix):] in listed)]


def record_of(files: dict[str, bytes], model: str, version: str, bundle_digest: str) -> bytes:
    """The canonical bytes of the record of `files` (model path → content)."""
    record = {"format": RECORD_FORMAT, "model": model, "version": str(version), "bundle": bundle_digest,
              "files": {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())}}
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def sign_record(record: bytes, private_key: Path) -> str:
    """The tag value: the record and its Ed25519 signature in `manifest.sig`'s format."""
    return json.dumps({"record": record.decode(), "signature": sign_bytes(record, private_key)[0]})


def record_problem(tag: str | None, files: dict[str, bytes], model: str, version: str, bundle_digest: str,
                   public_key) -> str | None:
    """Why the model version's non-bundle `files` (path → content) are not the ones `tag` signs, or None."""
    if not tag:
        return (f"no signed model record ({MODEL_RECORD_TAG}): its MLmodel and environment files are not "
                "covered by any signature (registered before records were signed, or by hand): re-register it")
    try:
        doc = json.loads(tag)
        record_bytes, signature = doc["record"].encode(), doc["signature"].encode()
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{MODEL_RECORD_TAG}: malformed ({exc})"
    problem = signature_problem_of(record_bytes, signature, public_key)
    if problem is not None:
        return f"model record: {problem.replace('manifest.json', 'the record')}"
    record = json.loads(record_bytes)
    if record.get("format") != RECORD_FORMAT:
        return f"model record: format {record.get('format')!r}, expected {RECORD_FORMAT}"
    if (record.get("model"), record.get("version")) != (model, str(version)):
        return (f"model record signs {record.get('model')!r} version {record.get('version')!r}, not {model!r} "
                f"version {version!r}: a record copied from another version")
    if record.get("bundle") != bundle_digest:
        return f"model record signs bundle {record.get('bundle')!r}, but the model holds {bundle_digest!r}"
    signed = record.get("files") or {}
    problems = [f"{path}: not in the signed record" for path in sorted(set(files) - set(signed))]
    problems += [f"{path}: missing" for path in sorted(set(signed) - set(files))]
    problems += [f"{path}: changed since it was signed" for path in sorted(set(files) & set(signed))
                 if hashlib.sha256(files[path]).hexdigest() != signed[path]]
    return "; ".join(problems) or None


def model_files(uri: str, listed: set[str]) -> dict[str, bytes]:
    """The contents of every file of the registered model at `uri` (`models:/name/version`) outside its
    bundle's listed files, from the store."""

    import mlflow

    paths, folders = [], [""]
    while folders:
        base = folders.pop()
        for info in mlflow.artifacts.list_artifacts(artifact_uri=f"{uri}/{base}" if base else uri):
            path = info.path if not base or info.path.startswith(base) else f"{base}/{info.path}"
            (folders if info.is_dir else paths).append(path)
    files = {}
    with temporary.scoped("model-files") as tmp:
        for path in sorted(_outside_bundle(paths, listed)):
            local = download_artifacts(f"{uri}/{path}", Path(tmp) / "f" / path.replace("/", "__"))
            local = local if local.is_file() else next(p for p in local.rglob("*") if p.is_file())
            files[path] = local.read_bytes()
    return files


def local_model_files(folder: Path, listed: set[str], name: str, version: str) -> dict[str, bytes]:
    """`model_files` of a downloaded copy of version `version` of `name`; a link or special file in it
    is an error, and the `registered_model_meta` MLflow's download writes is left out when it names
    exactly that version (it is not stored, so no record can sign it)."""
    paths, odd = walk_plain(Path(folder))
    if odd:
        raise ModelRecordError(f"{folder}: " + "; ".join(odd))
    files = {p: (Path(folder) / p).read_bytes() for p in _outside_bundle(paths, listed)}
    return without_download_meta(files, name, version)


def without_download_meta(files: dict[str, bytes], name: str, version: str) -> dict[str, bytes]:
    """`files` less the `registered_model_meta` MLflow itself writes beside a model it downloads or
    loads by `models:/` URI (`mlflow.pyfunc.load_model` writes it into the store's own folder), when
    it names exactly this model and version: the only file a verification leaves unsigned, named."""
    import yaml

    if DOWNLOAD_META in files:
        try:
            meta = yaml.safe_load(files[DOWNLOAD_META])
            if (set(meta) <= {"model_name", "model_version"}
                    and (str(meta["model_name"]), str(meta["model_version"])) == (name, str(version))):
                return {k: v for k, v in files.items() if k != DOWNLOAD_META}
        except (yaml.YAMLError, KeyError, TypeError):
            pass  # kept: not MLflow's, so the record must sign it
    return files


def version_record_problem(name: str, version: str, public_key, manifest, files: dict[str, bytes]) -> str | None:
    """Why `files` (a version's files outside its bundle) are not the ones its signed record vouches for."""
    from mlflow import MlflowClient

    tag = MlflowClient().get_model_version(name, version).tags.get(MODEL_RECORD_TAG)
    return record_problem(tag, files, name, str(version), manifest.version, public_key)


def verify_model_record(ref: str, public_key, manifest, tracking_uri: str | None = None) -> str | None:
    """Why the registered model `ref` (`models:/…`) holds files in the store its signed record does not
    vouch for, or None when every file outside its bundle is the one signed for that name and version."""
    _use_tracking(ref, tracking_uri)
    name, version = registered_version(ref)
    check_version_location(name, version)
    files = without_download_meta(model_files(f"models:/{name}/{version}", listed_paths(manifest)), name, version)
    return version_record_problem(name, version, public_key, manifest, files)


def sign_registered(name: str, version: str, manifest, private_key: Path) -> None:
    """Sign the record of registered version `version` of `name` (its files as the store now holds
    them) and keep it on the version as `MODEL_RECORD_TAG`."""
    from mlflow import MlflowClient

    files = model_files(f"models:/{name}/{version}", listed_paths(manifest))
    value = sign_record(record_of(files, name, str(version), manifest.version), private_key)
    MlflowClient().set_model_version_tag(name, str(version), MODEL_RECORD_TAG, value)

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

MODEL_RECORD_TAG = "routeforge.model_record"
RECORD_FORMAT = 1
BUNDLE_PARENTS = ("data/artifacts", "artifacts")  # where a model keeps its bundle folder (artifacts.registry)


class ModelRecordError(ValueError):
    """A registered model whose files are not the ones its record signs; the message says which."""


def _bundle_file(path: str, bundle_folder: str | None, listed: set[str]) -> bool:
    """Whether a model artifact path is a file of the bundle (covered by its manifest)."""
    if bundle_folder is None:
        return False
    prefix = f"{bundle_folder}/"
    return path.startswith(prefix) and path[len(prefix):] in listed


def record_of(files: dict[str, bytes], model: str, version: str, bundle_digest: str) -> bytes:
    """The canonical bytes of the record of `files` (model path → content)."""
    record = {"format": RECORD_FORMAT, "model": model, "version": str(version), "bundle": bundle_digest,
              "files": {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())}}
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def sign_record(record: bytes, private_key: Path) -> str:
    """The tag value: the record and its Ed25519 signature in `manifest.sig`'s format."""
    import base64

    from routeforge.artifacts.signing import ALGORITHM, _load_private, key_id

    key = _load_private(private_key)
    signature = {"algorithm": ALGORITHM, "key_id": key_id(key.public_key()),
                 "signature": base64.b64encode(key.sign(record)).decode()}
    return json.dumps({"record": record.decode(), "signature": json.dumps(signature)})


def record_problem(tag: str | None, files: dict[str, bytes], model: str, version: str, bundle_digest: str,
                   public_key) -> str | None:
    """Why the model version's non-bundle `files` (path → content) are not the ones `tag` signs, or None."""
    from routeforge.artifacts.signing import signature_problem_of

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


def model_files(uri: str, listed: set[str]) -> tuple[dict[str, bytes], str | None]:
    """The contents of every file of the registered model at `uri` (`models:/name/version`) outside its
    bundle's listed files, and the bundle folder's path in the model (None: not found)."""
    import tempfile

    import mlflow
    from routeforge.artifacts.registry import download_artifacts

    paths, folders = [], [""]
    while folders:
        base = folders.pop()
        for info in mlflow.artifacts.list_artifacts(artifact_uri=f"{uri}/{base}" if base else uri):
            path = info.path if not base or info.path.startswith(base) else f"{base}/{info.path}"
            (folders if info.is_dir else paths).append(path)
    bundle_folder = next((str(PurePosixPath(p).parent) for p in paths
                          if PurePosixPath(p).name == "manifest.json"
                          and str(PurePosixPath(p).parent.parent) in BUNDLE_PARENTS), None)
    files = {}
    with tempfile.TemporaryDirectory(prefix="routeforge-model-files-") as tmp:
        for path in sorted(paths):
            if _bundle_file(path, bundle_folder, listed):
                continue
            local = download_artifacts(f"{uri}/{path}", Path(tmp) / "f" / path.replace("/", "__"))
            local = local if local.is_file() else next(p for p in local.rglob("*") if p.is_file())
            files[path] = local.read_bytes()
    return files, bundle_folder


def verify_model_record(ref: str, public_key, manifest, tracking_uri: str | None = None,
                        local: Path | None = None) -> str | None:
    """Why the registered model `ref` (`models:/…`) holds files its signed record does not vouch for,
    or None when every file outside its bundle is the one signed for that name and version. With
    `local`, a complete download of that version is checked instead of the store (what `serve` hands
    MLflow: the very files verified)."""
    from mlflow import MlflowClient
    from routeforge.artifacts.registry import _use_tracking, registered_version

    _use_tracking(ref, tracking_uri)
    name, version = registered_version(ref)
    tag = MlflowClient().get_model_version(name, version).tags.get(MODEL_RECORD_TAG)
    listed = {f.path for c in manifest.components for f in c.files}
    files = local_model_files(local, listed) if local is not None else model_files(f"models:/{name}/{version}",
                                                                                    listed)[0]
    meta = files.get(DOWNLOAD_META)
    if local is not None and meta is not None and _meta_names(meta) == (name, str(version)):
        files.pop(DOWNLOAD_META)  # written by MLflow's download of this very version, not stored
    return record_problem(tag, files, name, str(version), manifest.version, public_key)


DOWNLOAD_META = "registered_model_meta"  # what `mlflow.artifacts.download_artifacts("models:/…")` adds


def _meta_names(data: bytes) -> tuple[str, str] | None:
    import yaml

    try:
        meta = yaml.safe_load(data)
        return str(meta["model_name"]), str(meta["model_version"])
    except (yaml.YAMLError, KeyError, TypeError):
        return None


def local_model_files(folder: Path, listed: set[str]) -> dict[str, bytes]:
    """`model_files` of a downloaded model folder; a link or special file in it is an error."""
    from routeforge.artifacts.plain_files import odd_entries

    odd = odd_entries(folder)
    if odd:
        raise ModelRecordError(f"{folder}: " + "; ".join(odd))
    paths = [p.relative_to(folder).as_posix() for p in sorted(Path(folder).rglob("*")) if p.is_file()]
    bundle_folder = next((str(PurePosixPath(p).parent) for p in paths if PurePosixPath(p).name == "manifest.json"
                          and str(PurePosixPath(p).parent.parent) in BUNDLE_PARENTS), None)
    return {p: (Path(folder) / p).read_bytes() for p in paths if not _bundle_file(p, bundle_folder, listed)}


def sign_registered(name: str, version: str, manifest, private_key: Path) -> None:
    """Sign the record of registered version `version` of `name` (its files as the store now holds
    them) and keep it on the version as `MODEL_RECORD_TAG`."""
    from mlflow import MlflowClient

    listed = {f.path for c in manifest.components for f in c.files}
    files, _ = model_files(f"models:/{name}/{version}", listed)
    value = sign_record(record_of(files, name, str(version), manifest.version), private_key)
    MlflowClient().set_model_version_tag(name, str(version), MODEL_RECORD_TAG, value)

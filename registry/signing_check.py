"""Before a run trains: is its signing key the one the registry's versions were signed with?

Why: with the storage folder gone (its `keys/` with it), a run made a new key, trained for its full
length, registered, and only then its release gate failed: "signed by another key". Every later run
did the same. Checked first, the run stops in one line that names both keys and the two ways on:
put the old key back, or rotate explicitly (`routeforge keys rotate`), which keeps the old public key
in `retired/` so the versions it signed are still verified with it (`signing.trusted_keys`).
"""

from __future__ import annotations

from pathlib import Path

from routeforge.artifacts.bundle.signing import RETIRED_FOLDER, key_id, load_public_key, public_key_path, trusted_keys
from routeforge.registry.release import CHAMPION
from routeforge.registry.store import registry_lock, sqlite_file


class SigningKeyMismatch(Exception):
    """The run's signing key is not the one the registry's versions carry (said before training)."""


def signed_by(client, model_name: str) -> tuple[str, str] | None:
    """(version, key id) of the version a new one will be gated against (the champion, else the
    newest signed version); None when the model has no signed version yet."""
    from mlflow.exceptions import MlflowException

    try:
        champion = client.get_model_version_by_alias(model_name, CHAMPION)
        if champion.tags.get("signing_key_id"):
            return str(champion.version), champion.tags["signing_key_id"]
    except MlflowException:
        pass  # no such model or no champion yet
    try:
        versions = client.search_model_versions(f"name='{model_name}'")
    except MlflowException:
        return None
    signed = sorted(((int(v.version), v.tags["signing_key_id"]) for v in versions if v.tags.get("signing_key_id")),
                    reverse=True)
    return (str(signed[0][0]), signed[0][1]) if signed else None


def check_signing_key(tracking_uri: str, model_name: str, private_key: Path) -> None:
    """Raise `SigningKeyMismatch` with `signing_key_problem`'s one line, if there is one."""
    problem = signing_key_problem(tracking_uri, model_name, private_key)
    if problem:
        raise SigningKeyMismatch(problem)


def signing_key_problem(tracking_uri: str, model_name: str, private_key: Path) -> str | None:
    """Why a run signing with `private_key` could not be gated against `model_name`'s versions (the
    key the registry's versions carry is neither that key nor one retired beside it), with the fix;
    None when it can."""
    import mlflow

    local = sqlite_file(tracking_uri)
    if local is not None and not local.is_file():
        return None  # no store yet, so no version to be gated against (and a check never makes one)
    # MLflow migrates a SQLite store's tables on first open: under the lock registration takes, so a
    # pipeline starting beside another that is creating the store does not race it
    with registry_lock(tracking_uri):
        found = signed_by(mlflow.MlflowClient(tracking_uri), model_name)
    if found is None:
        return None
    version, kid = found
    public = public_key_path(private_key)
    current = key_id(load_public_key(public)) if Path(private_key).is_file() and public.is_file() else None
    if kid in trusted_keys(public):
        return None
    have = f"key id {current}" if current else "missing: a new key would be made"
    return (f"registry.signing_key: the key at {private_key} ({have}) is not the key version {version} of "
            f"{model_name!r} was signed with (key id {kid}), so the release gate could not verify it after "
            f"training. Put that key back at {private_key}, or rotate explicitly: `routeforge keys rotate "
            f"{private_key} --retire-public OLD.pub` (OLD.pub: key {kid}'s public half, from a backup or a "
            f"router service's pinned copy: `routeforge keys list`), which keeps it in "
            f"{public.parent / RETIRED_FOLDER}/")

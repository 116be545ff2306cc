"""Who may write to the registry: the writer and reader accounts of an MLflow server that runs its
basic-auth app (deploy/mlflow/start-mlflow.sh).

The server starts with `default_permission = NO_PERMISSIONS`, so an account can do only what is
granted here, by the admin:
- the fleet's experiment and registered model are created by the admin if they do not exist, so no
  other account can create them first and own them;
- the **writer** (the pipeline) gets MANAGE on both: it logs runs, registers versions, sets tags and
  moves aliases (the release gate, `bundle promote` / `rollback`);
- the **reader** (router services) gets READ on both: it resolves `@champion`, reads the recorded
  public key and downloads the bundle through the server's artifact proxy, and is refused (403)
  when it registers a version, moves or deletes an alias, or sets a tag.

MLflow's own client for the auth app (`mlflow.server.get_app_client("basic-auth")`) does the work;
this module only decides what to grant. It needs the full `mlflow` package (the pipeline's), not
the runtime's client.
"""

from __future__ import annotations

from dataclasses import dataclass

WRITER_PERMISSION = "MANAGE"
READER_PERMISSION = "READ"


@dataclass(frozen=True)
class Account:
    username: str
    password: str


def _ensure_user(auth, account: Account) -> str:
    """Create the user, or set its password where it exists (re-running provisioning rotates it)."""
    from mlflow.exceptions import MlflowException

    try:
        auth.get_user(account.username)
    except MlflowException:
        auth.create_user(account.username, account.password)
        return "created"
    auth.update_user_password(account.username, account.password)
    return "password updated"


def provision(tracking_uri: str, model_name: str, experiment: str, writer: Account, reader: Account) -> list[str]:
    """Create (or update) the two accounts and grant them the fleet's experiment and registered
    model; the caller's own credentials (MLFLOW_TRACKING_USERNAME / _PASSWORD) must be the admin's.
    Returns one line per action, for the operator."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.server import get_app_client

    if writer.username == reader.username:
        raise ValueError("the writer and reader accounts must differ")
    auth = get_app_client("basic-auth", tracking_uri=tracking_uri)
    client = MlflowClient(tracking_uri)
    done = [f"user {a.username}: {_ensure_user(auth, a)}" for a in (writer, reader)]
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    done.append(f"experiment {experiment!r} ({experiment_id}): {'exists' if found else 'created'}")
    try:
        client.create_registered_model(model_name)
        done.append(f"registered model {model_name!r}: created")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        done.append(f"registered model {model_name!r}: exists")
    for account, permission in ((writer, WRITER_PERMISSION), (reader, READER_PERMISSION)):
        auth.grant_user_permission(account.username, "experiment", experiment_id, permission)
        auth.grant_user_permission(account.username, "registered_model", model_name, permission)
        done.append(f"{account.username}: {permission} on experiment {experiment!r} and model {model_name!r}")
    return done

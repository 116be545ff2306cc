"""Who may write (issue 37, item 7), for real on loopback: the MLflow server started as
deploy/mlflow/start-mlflow.sh starts it (basic-auth app, nothing granted by default), its accounts
made by `routeforge bundle accounts`, its artifacts on an S3 server (moto, IAM on) reached with the
least-privilege key of deploy/object-store/mlflow-server.json.

- anonymous requests and the reader account cannot register versions, move or delete aliases, or
  set tags (401 / 403), through the client, the pipeline's publish path or the CLI;
- the pipeline's publish path registers versions and the release code moves `@champion` with the
  writer account;
- a router service loads `models:/<name>@champion` with the reader account, its signature checked
  with the key the pipeline recorded on the registered model;
- each object-store key reaches its own buckets only.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.signing import generate_key_pair
from routeforge.artifacts.cli.commands import main
from routeforge.registry.publish import publish_bundle
from routeforge.registry.release import Decision, ModelRegistry

from tests.conftest import REPO
from tests.services import Unavailable, mlflow_server, s3_server

pytestmark = pytest.mark.e2e

MODEL, EXPERIMENT = "auth-router", "auth-fleet"
ADMIN = ("admin", "admin-password-" + os.urandom(6).hex())
WRITER = ("routeforge-pipeline", "writer-password-" + os.urandom(6).hex())
READER = ("routeforge-router", "reader-password-" + os.urandom(6).hex())
# a refusal must come back as the server's answer, not hidden by retries; the answer itself may be
# slow while the other test worker loads both cores (the auth app hashes each new password), so the
# read timeout is MLflow's own default of 120 s rather than ten
CLIENT_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "120"}
POLICIES = {name: REPO / "deploy" / "object-store" / f"{name}.json" for name in ("mlflow-server", "pipeline")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("registry-auth")
    with contextlib.ExitStack() as servers:
        try:
            s3 = servers.enter_context(s3_server(folder / "s3", ("mlflow", "routeforge", "dagster-logs"), POLICIES))
        except Unavailable as exc:
            pytest.skip(f"S3 server unavailable on this machine: {exc}")
        url = servers.enter_context(mlflow_server(folder / "mlflow", f"sqlite:///{folder / 'mlflow.db'}",
                                                  "s3://mlflow/artifacts", s3.env_of("mlflow-server"),
                                                  admin_password=ADMIN[1]))
        yield {"url": url, "s3": s3, "folder": folder}


@contextlib.contextmanager
def account(user: tuple[str, str] | None):
    """MLFLOW_TRACKING_USERNAME / _PASSWORD of `user` (None: anonymous) for the block; restored after."""
    saved = {k: os.environ.pop(k, None) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    if user is not None:
        os.environ.update(MLFLOW_TRACKING_USERNAME=user[0], MLFLOW_TRACKING_PASSWORD=user[1])
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value


def _cli(args: list[str], user: tuple[str, str] | None, **env: str):
    creds = {"MLFLOW_TRACKING_USERNAME": user[0], "MLFLOW_TRACKING_PASSWORD": user[1]} if user else {
        "MLFLOW_TRACKING_USERNAME": None, "MLFLOW_TRACKING_PASSWORD": None}
    return CliRunner().invoke(main, args, env={**creds, **CLIENT_ENV, **env})


def _publish(server, tmp_path, component, fleet, key: Path, round_: int):
    return publish_bundle(name=MODEL, fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{round_}",
                          tracking_uri=server["url"], experiment=EXPERIMENT, artifact_location=None,
                          alias="challenger", input_hashes={"prompts": f"{round_}" * 64}, params={}, metrics={},
                          signing_key=key)[0]


def _refused(call) -> str:
    from mlflow.exceptions import MlflowException, RestException

    with pytest.raises((MlflowException, RestException)) as info:
        call()
    message = str(info.value)
    assert "403" in message or "401" in message or "Permission denied" in message or "not authenticated" in message, \
        message
    return message


def test_only_the_writer_registers_and_the_reader_loads_the_champion(server, tmp_path, component, fleet, monkeypatch):
    from mlflow import MlflowClient

    for key, value in CLIENT_ENV.items():
        monkeypatch.setenv(key, value)
    url = server["url"]
    # the operator, as admin, makes the accounts (passwords from the environment only)
    short = _cli(["bundle", "accounts", MODEL, "--experiment", EXPERIMENT, "--tracking-uri", url], ADMIN,
                 ROUTEFORGE_WRITER_PASSWORD="short", ROUTEFORGE_READER_PASSWORD=READER[1])
    assert short.exit_code == 2 and "ROUTEFORGE_WRITER_PASSWORD" in short.output
    made = _cli(["bundle", "accounts", MODEL, "--experiment", EXPERIMENT, "--tracking-uri", url], ADMIN,
                ROUTEFORGE_WRITER_PASSWORD=WRITER[1], ROUTEFORGE_READER_PASSWORD=READER[1])
    assert made.exit_code == 0, made.output
    assert "routeforge-pipeline: MANAGE" in made.output and "routeforge-router: READ" in made.output

    key = tmp_path / "keys" / "bundle.key"
    generate_key_pair(key)
    with account(None):  # anonymous: nothing, not even reading
        _refused(lambda: MlflowClient(url).search_registered_models())
        _refused(lambda: _publish(server, tmp_path, component, fleet, key, 0))
    with account(READER):  # the reader cannot register
        _refused(lambda: _publish(server, tmp_path, component, fleet, key, 1))
    with account(WRITER):  # the pipeline's publish path and the release code, as the writer
        first = _publish(server, tmp_path, component, fleet, key, 2)
        (component.folder / "nested" / "meta.json").write_text('{"k": 4}')
        second = _publish(server, tmp_path, component, fleet, key, 3)
        assert (first.version, second.version) == ("1", "2") and not second.unchanged
        registry = ModelRegistry(url, MODEL)
        for version in ("1", "2"):
            registry.move_champion(version, Decision(True, ["test"], {}, None), None)
        assert str(registry.champion_version()) == "2"
    with account(READER):
        client = MlflowClient(url)
        assert str(client.get_model_version_by_alias(MODEL, "champion").version) == "2"  # reading is allowed
        for move in (lambda: client.set_registered_model_alias(MODEL, "champion", "1"),
                     lambda: client.delete_registered_model_alias(MODEL, "champion"),
                     lambda: client.set_registered_model_tag(MODEL, "routeforge.public_key", "forged"),
                     lambda: client.set_model_version_tag(MODEL, "1", "gate.decision", "promoted")):
            _refused(move)
        # the CLI's alias move says so in one line
        rollback = _cli(["bundle", "rollback", MODEL, "--tracking-uri", url], READER)
        assert rollback.exit_code == 1 and len(rollback.stderr.strip().splitlines()) == 1
        assert "403" in rollback.stderr or "Permission denied" in rollback.stderr, rollback.stderr
        assert str(client.get_model_version_by_alias(MODEL, "champion").version) == "2"  # unmoved
        # a router service: @champion with the reader account, verified with the key the pipeline recorded
        bundle = load_bundle(f"models:/{MODEL}@champion", tmp_path / "router", url)
        assert bundle.manifest.lineage.input_hashes == {"prompts": "3" * 64}
    anonymous = _cli(["bundle", "verify", f"models:/{MODEL}@champion", "--tracking-uri", url], None)
    assert anonymous.exit_code == 1 and len(anonymous.stderr.strip().splitlines()) == 1
    with account(WRITER):  # and the writer can roll back
        rolled = _cli(["bundle", "rollback", MODEL, "--tracking-uri", url, "--reason", "test"], WRITER)
        assert rolled.exit_code == 0, rolled.output
        assert str(ModelRegistry(url, MODEL).champion_version()) == "1"


def test_each_object_store_key_reaches_its_own_buckets_only(server):
    import boto3
    from botocore.exceptions import ClientError

    s3 = server["s3"]

    def client(user: str):
        key, secret = s3.users[user]
        return boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                            region_name="us-east-1")

    allowed = {"mlflow-server": ["mlflow"], "pipeline": ["routeforge", "dagster-logs"]}
    for user, buckets in allowed.items():
        c = client(user)
        for bucket in ("mlflow", "routeforge", "dagster-logs"):
            if bucket in buckets:
                c.put_object(Bucket=bucket, Key=f"probe/{user}", Body=b"x")
                assert c.get_object(Bucket=bucket, Key=f"probe/{user}")["Body"].read() == b"x"
                c.delete_object(Bucket=bucket, Key=f"probe/{user}")
            else:
                for call in (lambda: c.put_object(Bucket=bucket, Key="probe/x", Body=b"x"),
                             lambda: c.list_objects_v2(Bucket=bucket)):
                    with pytest.raises(ClientError, match="AccessDenied"):
                        call()

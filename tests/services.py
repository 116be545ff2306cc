"""Real servers on 127.0.0.1 for the production-shaped tests: PostgreSQL, an S3 server (moto's
server mode, with IAM authentication on) and an MLflow tracking server on both.

Every server is a child process started here and stopped by its PID (process group) when its
context exits; every wait is bounded. A component that cannot start on this machine raises
`Unavailable` with the reason, which tests turn into a skip that says why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from routeforge.generation.local_server import free_port, stop_group, wait_healthy


class Unavailable(RuntimeError):
    """A server this test needs cannot start on this machine (the message says why)."""


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the process group, SIGKILL what is left after `timeout`."""
    stop_group(process, timeout)


@contextlib.contextmanager
def child(command: list[str], log: Path, env: dict[str, str] | None = None, **kwargs) -> Iterator[subprocess.Popen]:
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                   **kwargs)
    try:
        yield process
    finally:
        stop(process)


# -- PostgreSQL -----------------------------------------------------------------------------------

def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
    if not found:
        raise Unavailable(f"PostgreSQL's {name} is not installed (Debian package `postgresql`)")
    return str(found)


def _as_postgres_user() -> list[str]:
    """initdb and postgres refuse to run as root: run them as the `postgres` account when root."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if not runuser:
        raise Unavailable("running as root and `runuser` is missing: PostgreSQL cannot be started")
    return [runuser, "-u", "postgres", "--"]


@contextlib.contextmanager
def postgres(folder: Path, databases: tuple[str, ...] = ("dagster", "mlflow")) -> Iterator[dict[str, str]]:
    """A PostgreSQL server in `folder` on a free loopback port; yields {database: SQLAlchemy URL}."""
    import psycopg2

    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    prefix = _as_postgres_user()
    folder.mkdir(parents=True, exist_ok=True)
    # as root, the cluster lives where the `postgres` account can reach it (pytest's folders are 0700)
    home = Path(tempfile.mkdtemp(prefix="routeforge-postgres-")) if prefix else folder
    data, sockets = home / "data", home / "sockets"
    sockets.mkdir(exist_ok=True)
    if prefix:
        shutil.chown(home, "postgres")
        shutil.chown(sockets, "postgres")
    log = home / "postgres.log"
    init = subprocess.run([*prefix, initdb, "-D", str(data), "-U", "routeforge", "--auth=trust", "-E", "UTF8"],
                          capture_output=True, text=True, timeout=120)
    if init.returncode:
        raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
    port = free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off"
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "-t", "60", "start"],
                   check=True, capture_output=True, timeout=90)
    pid = int((data / "postmaster.pid").read_text().splitlines()[0])
    try:
        admin = psycopg2.connect(host="127.0.0.1", port=port, user="routeforge", dbname="postgres")
        admin.autocommit = True
        with admin.cursor() as cursor:
            for name in databases:
                cursor.execute(f'CREATE DATABASE "{name}"')
        admin.close()
        # the driver named: SQLAlchemy 2.1 would pick psycopg 3 for a bare postgresql://
        yield {name: f"postgresql+psycopg2://routeforge@127.0.0.1:{port}/{name}" for name in databases}
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop"],
                       capture_output=True, timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # only if `pg_ctl stop` did not stop it
        if log.exists():
            shutil.copy(log, folder / "postgres.log")
        if home != folder:
            shutil.rmtree(home, ignore_errors=True)


# -- S3 (moto server, IAM authentication on) -------------------------------------------------------

@dataclass(frozen=True)
class S3:
    endpoint: str
    key: str
    secret: str
    bucket: str
    users: dict[str, tuple[str, str]] = field(default_factory=dict)  # name → (key, secret), least privilege

    def env_of(self, user: str) -> dict[str, str]:
        """`env` with the key of one of the least-privilege `users`."""
        key, secret = self.users[user]
        return {**self.env, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}

    @property
    def env(self) -> dict[str, str]:
        """What boto3, s3fs and the MLflow server read."""
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint, "MLFLOW_S3_ENDPOINT_URL": self.endpoint}

    @property
    def storage_options(self) -> dict[str, object]:
        return {"key": self.key, "secret": self.secret, "client_kwargs": {"endpoint_url": self.endpoint,
                                                                          "region_name": "us-east-1"}}


@contextlib.contextmanager
def s3_server(folder: Path, buckets: tuple[str, ...] = ("routeforge",),
              policies: dict[str, Path] | None = None) -> Iterator[S3]:
    """moto's S3 server on a free loopback port. Authentication is switched on after the setup
    calls (one IAM user with an access key allowed everything, the buckets, and one user per IAM
    policy document of `policies`, e.g. deploy/object-store/*.json), so a wrong key is refused as on
    AWS, and a least-privilege key is refused outside its policy."""
    import boto3

    try:
        import moto.server  # noqa: F401
        import s3fs
    except ImportError as exc:
        raise Unavailable(f"moto[server] is not installed ({exc})") from exc
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    policies = policies or {}
    setup_calls = 3 + len(buckets) + 3 * len(policies)
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(setup_calls)}
    log = folder / "moto.log"
    with child([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log, env=env) as process:
        wait_healthy(process, f"{endpoint}/moto-api/", log, timeout_s=60)
        bootstrap = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "bootstrap",
                     "aws_secret_access_key": "bootstrap"}
        iam = boto3.client("iam", **bootstrap)
        iam.create_user(UserName="routeforge")
        key = iam.create_access_key(UserName="routeforge")["AccessKey"]
        iam.put_user_policy(UserName="routeforge", PolicyName="all", PolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'))
        s3 = boto3.client("s3", **bootstrap)
        for bucket in buckets:
            s3.create_bucket(Bucket=bucket)
        users = {}
        for name, policy in policies.items():
            iam.create_user(UserName=name)
            access = iam.create_access_key(UserName=name)["AccessKey"]
            iam.put_user_policy(UserName=name, PolicyName=name, PolicyDocument=Path(policy).read_text())
            users[name] = (access["AccessKeyId"], access["SecretAccessKey"])
        # fsspec caches filesystems by their arguments: one made for an earlier server (its
        # endpoint read from the environment) would be handed out again, pointing at a dead port
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            yield S3(endpoint, key["AccessKeyId"], key["SecretAccessKey"], buckets[0], users)
        finally:
            s3fs.S3FileSystem.clear_instance_cache()


# -- MLflow tracking server ------------------------------------------------------------------------

@contextlib.contextmanager
def mlflow_server(folder: Path, backend_store_uri: str, artifacts_destination: str,
                  env: dict[str, str], admin_password: str | None = None) -> Iterator[str]:
    """`mlflow server` on a free loopback port, proxying artifacts (clients speak HTTP only). With
    `admin_password`, it is started as production starts it, by deploy/mlflow/start-mlflow.sh (the
    basic-auth app, users in SQLite beside the log, nothing granted by default)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mlflow = Path(sys.executable).with_name("mlflow")
    arguments = ["--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                 "--backend-store-uri", backend_store_uri, "--artifacts-destination", artifacts_destination]
    command = [str(mlflow), "server", *arguments]
    log = folder / "mlflow-server.log"
    server_env = {**os.environ, **env}
    if admin_password is not None:
        command = ["sh", str(Path(__file__).resolve().parent.parent / "deploy" / "mlflow" / "start-mlflow.sh"),
                   *arguments]
        server_env |= {"PATH": f"{mlflow.parent}{os.pathsep}{os.environ.get('PATH', '')}",
                       "MLFLOW_AUTH_DATABASE_URI": f"sqlite:///{folder / 'auth.db'}",
                       "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
                       "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex()}
    with child(command, log, env=server_env) as process:
        wait_healthy(process, f"{url}/health", log, timeout_s=180)
        yield url


# -- Ray (a local cluster: the head node in the foreground, stopped with its process group) -------

@contextlib.contextmanager
def ray_cluster(folder: Path, num_cpus: int = 2) -> Iterator[str]:
    """A one-node Ray cluster on loopback; yields the job server's address (http://127.0.0.1:port)."""
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        raise Unavailable("ray is not installed (the `deploy` extra: ray[default])")
    folder.mkdir(parents=True, exist_ok=True)
    dashboard = free_port()
    # Ray's socket paths must stay short (AF_UNIX limit): its session folder goes under /tmp
    temp = Path(tempfile.mkdtemp(prefix="rf-ray-"))
    command = [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(free_port()),
               "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--num-cpus", str(num_cpus),
               "--include-dashboard", "true", "--disable-usage-stats", "--temp-dir", str(temp)]
    log = folder / "ray.log"
    # a loopback test cluster: Ray 2.60 turns token authentication on by default, which the job
    # server then asks of every client (the readiness probe included)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    try:
        with child(command, log, env=env) as process:
            address = f"http://127.0.0.1:{dashboard}"
            wait_healthy(process, f"{address}/api/version", log, timeout_s=120)
            yield address
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def ray_job_outcome(client, submission_id: str, timeout_s: float = 120) -> str:
    """The job's terminal status, waited for (bounded): a step's Dagster events reach the instance
    before its Ray driver has exited, so a run can be SUCCESS while its jobs still read RUNNING."""
    import time

    deadline = time.monotonic() + timeout_s
    while not (status := client.get_job_status(submission_id)).is_terminal():
        if time.monotonic() > deadline:
            raise AssertionError(f"Ray job {submission_id} still {status} after {timeout_s:.0f} s")
        time.sleep(1)
    return str(status)


# -- the fleet these deployments run ---------------------------------------------------------------

# the router's model selection narrowed to one candidate per member and one truncation side, to keep a
# pipeline test in minutes (the shipped grid is benchmarks/router_selection.py's business; choosing the
# truncation side by CV has its own test in tests/training/predictors/test_router_selection.py)
TEST_ROUTER_SELECTION = {"enabled": True, "folds": 3, "knn_k": [10], "knn_prior_strength": [10.0], "mlp_hidden": [0],
                         "mlp_epochs": 10, "mf_dim": [16], "mf_epochs": 10, "guard_bootstrap": 200}


def routerbench_fleet(folder: Path, shared_data: Path, storage_root: str, tracking_uri: str,
                      artifact_location: str | None = None, limit: int | None = None,
                      models: int | None = None) -> Path:
    """configs/routerbench.yaml with its state on `storage_root` and its registry at `tracking_uri`
    (artifacts: `artifact_location`, or the tracking server's choice); `limit`: the first this many
    rows of each RouterBench table (embedding the prompts is most of a run's time on a CPU);
    `models`: the first this many of its 11 models (a job run each)."""
    raw = yaml.safe_load((Path(__file__).resolve().parent.parent / "configs" / "routerbench.yaml").read_text())
    raw["storage_root"] = storage_root
    raw["models"] = raw["models"][:models]
    for dataset in raw["datasets"]:
        dataset["files"] = {split: [f.replace("${ROUTEFORGE_DATA:-../../shared/data}", str(shared_data)) for f in files]
                            for split, files in dataset["files"].items()}
        if limit is not None:
            dataset["limit"] = limit
    raw["registry"] = {**raw["registry"], "tracking_uri": tracking_uri}
    raw["registry"].pop("artifact_location", None)
    if artifact_location:
        raw["registry"]["artifact_location"] = artifact_location
    raw["training"]["router"] = TEST_ROUTER_SELECTION  # every stage runs, the router's selection narrowed
    path = folder / "routerbench-production.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path

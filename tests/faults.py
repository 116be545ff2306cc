"""A fault-injecting HTTP proxy on 127.0.0.1 for testing clients against a real server.

Each request is forwarded to the upstream server, except that with probability `rate` it suffers one
fault drawn from `kinds`: an HTTP 503 or 429, a connection dropped before any response, a stream cut
off after its first chunks, or a delay longer than the client's timeout. Draws are seeded so a
test is reproducible; counts of what was injected are kept for the report (a stream cut is counted
only when the stream had more to send, since a short stream may arrive whole before the cut).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter

import aiohttp
from aiohttp import web

FAULT_KINDS = ("http_503", "http_429", "drop_before_response", "drop_mid_stream", "slow")


class FaultProxy:
    def __init__(self, upstream: str, rate: float, seed: int = 0, slow_s: float = 3.0, kinds=FAULT_KINDS):
        self.upstream = upstream.rstrip("/")
        self.rate = rate
        self.rng = random.Random(seed)
        self.slow_s = slow_s
        self.kinds = kinds
        self.injected: Counter[str] = Counter()
        self.forwarded = 0
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        fault = self.rng.choice(self.kinds) if self.rng.random() < self.rate else None
        if fault and fault != "drop_mid_stream":  # a cut counts only if it cuts something (below)
            self.injected[fault] += 1
        if fault == "http_503":
            return web.Response(status=503, text="injected: service unavailable")
        if fault == "http_429":
            return web.Response(status=429, text="injected: too many requests")
        if fault == "drop_before_response":
            request.transport.close()
            return web.Response(status=500)  # never sent: the connection is gone
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        self.forwarded += 1
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            async with session.request(request.method, self.upstream + request.path_qs, data=body,
                                       headers=headers) as upstream:
                response = web.StreamResponse(status=upstream.status)
                response.content_type = upstream.content_type
                await response.prepare(request)
                chunks = 0
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                    chunks += 1
                    if fault == "drop_mid_stream" and chunks >= 2 and not upstream.content.at_eof():
                        self.injected[fault] += 1
                        request.transport.close()
                        return response
                await response.write_eof()
                return response

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

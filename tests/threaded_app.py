"""A real HTTP server for a test double: an aiohttp application on 127.0.0.1, served by an
event loop in a thread of its own, so synchronous tests, worker processes and the SDKs under
test reach it as they would a provider. The scripted judge, the Batch API double and the
score platforms' doubles are each one (``routes`` says what they answer)."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class ThreadedApp:
    """Start with ``with Double() as d:`` (or ``start()`` / ``stop()``); ``port`` is known
    once started (``port=0``: any free one)."""

    name = "test-double"
    # cancel a handler when its client goes away (a judge call the SDK gave up on)
    handler_cancellation = False

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.name} did not start")
        return self

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.add_routes(self.routes())
        self._runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=0.5,
            handler_cancellation=self.handler_cancellation,
        )
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        self._loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        if self._loop and self._runner:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A minimal OpenAI-compatible endpoint for tests of the client itself (never of an engine)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from cluster.engine.server import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def loopback_port() -> int:
    return free_port("127.0.0.1")


async def serve(handler: Handler) -> tuple[web.AppRunner, str]:
    """Start ``handler`` on POST /v1/completions at a free loopback port; returns (runner, base URL)."""
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = loopback_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"

"""An aiohttp application served on 127.0.0.1 on a free port, for the tests' own servers."""

from __future__ import annotations

from aiohttp import web


class LoopbackServer:
    """`start(app)` serves it; `url` and `port` say where; `stop()` closes it."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def serve(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

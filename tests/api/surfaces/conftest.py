from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.api.surfaces.scripted_upstream import ScriptedUpstream


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedUpstream]:
    server = ScriptedUpstream()
    await server.start()
    yield server
    await server.stop()

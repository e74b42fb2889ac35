"""The provisioner's tests' harness: the world of `world.default_world`, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.harness import Harness
from tests.unit.provisioning.world import default_world


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = await default_world()
    try:
        yield harness
    finally:
        await harness.close()

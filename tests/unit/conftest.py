"""Fixtures every unit test may take: ``harness`` (the in-memory apiserver under the real cache and
the operator's context, ``tests/unit/harness.py``) and ``world`` (a cluster of NodePools, Nodes and
NodeClaims on it for disruption and GPU-idle tests, ``tests/unit/disruption/world.py``). Builders
of the objects themselves are ``tests/unit/builders.py``'s."""

from tests.unit.disruption.world import world
from tests.unit.harness import harness

__all__ = ["harness", "world"]

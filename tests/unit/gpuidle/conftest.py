from tests.unit.disruption.world import world

__all__ = ["world"]

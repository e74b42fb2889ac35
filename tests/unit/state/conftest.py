from tests.unit.nodeclaim.harness import harness

__all__ = ["harness"]

"""Just-created NodeClaims are counted until the cache shows them, and never forever."""

from __future__ import annotations

from controller.state.recent import TTL_SECONDS, RecentClaims


def _claim(name: str) -> dict[str, dict[str, str]]:
    return {"metadata": {"name": name}}


def test_a_claim_counts_until_the_cache_shows_it() -> None:
    recent = RecentClaims()
    recent.add(_claim("a"), now=0)
    recent.add(_claim("b"), now=0)
    assert [c["metadata"]["name"] for c in recent.pending({}, now=1)] == ["a", "b"]
    assert [c["metadata"]["name"] for c in recent.pending({"a": _claim("a")}, now=2)] == ["b"]
    assert recent.get("a") is None


def test_a_claim_deleted_before_the_cache_saw_it_stops_counting() -> None:
    recent = RecentClaims()
    recent.add(_claim("gone"), now=0)
    assert recent.pending({}, now=TTL_SECONDS - 1)
    assert recent.pending({}, now=TTL_SECONDS + 1) == []


def test_a_discarded_claim_stops_counting_at_once() -> None:
    recent = RecentClaims()
    recent.add(_claim("a"), now=0)
    recent.add(_claim("b"), now=0)
    recent.discard("a")
    recent.discard("never-added")
    assert recent.get("a") is None
    assert [c["metadata"]["name"] for c in recent.pending({}, now=1)] == ["b"]

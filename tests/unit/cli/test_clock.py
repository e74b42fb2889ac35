"""The token bucket on the injected clock."""

from __future__ import annotations

from controller.clock import FakeClock, TokenBucket


async def test_a_token_bucket_lets_a_burst_through_then_its_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(clock, rate=5.0, burst=10)
    assert sum(bucket.take() for _ in range(30)) == 10
    await clock.advance(1.0)
    assert sum(bucket.take() for _ in range(30)) == 5
    # idle for a long time: never more than the burst
    await clock.advance(60.0)
    assert sum(bucket.take() for _ in range(30)) == 10

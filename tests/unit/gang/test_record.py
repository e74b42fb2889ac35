"""The gang's durable record survives a round trip through a pod annotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from controller.gang.record import ADMITTED, PROVISIONING, ROLLED_BACK, Avoided, Record, newest, record_of
from controller.state.views import PodView

T0 = datetime(2026, 1, 1, tzinfo=UTC)
names = st.lists(st.from_regex(r"[a-z0-9-]{1,20}", fullmatch=True), max_size=8).map(tuple)
times = st.one_of(st.none(), st.integers(0, 10**7).map(lambda s: T0 + timedelta(seconds=s)))
avoided = st.lists(
    st.builds(Avoided, st.from_regex(r"[a-z0-9-]{1,8}/[a-z0-9-]{1,8}/[a-z-]{1,9}", fullmatch=True), times), max_size=8
).map(tuple)


@given(
    seq=st.integers(0, 10**6),
    attempt=st.integers(0, 1000),
    phase=st.sampled_from([PROVISIONING, ROLLED_BACK, ADMITTED]),
    nodeclaims=names,
    started=times,
    deadline=times,
    retry_at=times,
    rollbacks=st.integers(0, 100),
    failure=st.text(max_size=200),
    avoid=avoided,
    members=st.integers(0, 5000),
    level=st.integers(0, 100),
    replans=st.integers(0, 8),
)
def test_round_trip(
    seq: int,
    attempt: int,
    phase: str,
    nodeclaims: tuple[str, ...],
    started: datetime | None,
    deadline: datetime | None,
    retry_at: datetime | None,
    rollbacks: int,
    failure: str,
    avoid: tuple[Avoided, ...],
    members: int,
    level: int,
    replans: int,
) -> None:
    record = Record(
        seq=seq,
        attempt=attempt,
        id="abc123",
        phase=phase,  # type: ignore[arg-type]
        nodeclaims=nodeclaims,
        started=started,
        deadline=deadline,
        rollbacks=rollbacks,
        retry_at=retry_at,
        last_failure=failure,
        avoid=avoid,
        members=members,
        level=level,
        replans=replans,
    )
    assert Record.from_json(record.to_json()) == record


def test_garbage_is_no_record() -> None:
    for text in ("", "{", "[]", '{"seq": 1}', '{"seq": 1, "phase": "Dancing"}', '{"seq": "x", "phase": "Admitted"}'):
        assert Record.from_json(text) is None


def test_the_newest_write_wins() -> None:
    old = Record(seq=3, attempt=1, id="a", phase=PROVISIONING)
    new = old.next(phase=ROLLED_BACK)
    assert new.seq == 4
    assert newest([old, None, new]) is new
    assert newest([]) is None
    pod = {"metadata": {"annotations": {"joiner.sh/gang-state": new.to_json()}}}
    assert record_of(PodView.of(pod)) == new
    assert record_of(PodView.of({"metadata": {}})) is None


def test_avoided_offerings_expire_and_old_records_still_read() -> None:
    record = Record(
        seq=1,
        attempt=2,
        id="a",
        phase=ROLLED_BACK,
        rollbacks=2,
        level=1,
        avoid=(Avoided("gpu-8/zone-a/spot", T0 + timedelta(minutes=3)), Avoided("gpu-8/zone-b/spot", T0)),
    )
    assert record.avoiding(T0) == ("gpu-8/zone-a/spot",)
    assert record.avoiding(T0 + timedelta(minutes=3)) == ()
    # written by a joiner that kept plain names and no level: read, nothing avoided, level = rollbacks
    legacy = Record.from_json('{"seq":1,"attempt":2,"id":"a","phase":"RolledBack","rollbacks":2,"avoid":["x/y/z"]}')
    assert legacy is not None
    assert legacy.avoid == (Avoided("x/y/z"),)
    assert legacy.avoiding(T0) == ()
    assert legacy.level == 2
    assert Record.from_json('{"seq":1,"phase":"RolledBack","avoid":[7]}') is None


def test_the_retry_after_a_failure_avoids_it_however_long_the_rollback_took() -> None:
    from datetime import UTC, datetime, timedelta

    from controller.gang.record import Avoided, accumulate, refreshed

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    avoid = accumulate((), ["m7a.medium/zone-a/spot"], now=t0, ttl_seconds=3, attempt=2)
    assert avoid == (Avoided("m7a.medium/zone-a/spot", t0 + timedelta(seconds=3), 2),)
    assert Avoided.from_json(avoid[0].to_json()) == avoid[0]
    late = t0 + timedelta(seconds=20)  # cleaning up and the backoff outlasted the 3 s TTL
    assert not avoid[0].active(late)
    [kept] = refreshed(avoid, now=late, last_attempt=2, ttl_seconds=3)
    assert kept.offering == "m7a.medium/zone-a/spot"
    assert kept.until == late + timedelta(seconds=3)  # a full TTL from the retry
    # an older attempt's failure lapses with its TTL: a one-off refusal does not exclude it for good
    assert refreshed(avoid, now=late, last_attempt=3, ttl_seconds=3) == []
    assert Avoided("x/y/spot", None).active_for(late, last_attempt=0) is False


# --- the record's transitions --------------------------------------------------------------------


def test_an_attempt_carries_over_what_the_rolled_back_ones_learned() -> None:
    from controller.gang.record import next_attempt, started

    failed = Avoided("gpu-8/zone-b/on-demand", T0 + timedelta(seconds=60), attempt=3)
    stale = Avoided("gpu-8/zone-c/on-demand", T0 + timedelta(seconds=10), attempt=1)
    before = Record(
        seq=9, attempt=3, id="x", phase=ROLLED_BACK, rollbacks=2, level=1, last_failure="boom", avoid=(failed, stale)
    )
    assert next_attempt(before, None) == 4
    assert next_attempt(None, Record(seq=1, attempt=6, id="y", phase=ADMITTED)) == 7
    assert next_attempt(None, None) == 1
    now = T0 + timedelta(seconds=30)
    r = started(
        before, seq=10, attempt=4, id="z", nodeclaims=("n0",), now=now, timeout_seconds=600, ttl_seconds=180, members=2
    )
    assert (r.phase, r.attempt, r.id, r.rollbacks, r.level, r.last_failure, r.members) == (
        PROVISIONING,
        4,
        "z",
        2,
        1,
        "boom",
        2,
    )
    assert r.deadline == now + timedelta(minutes=10)
    assert r.avoid == (failed,), "an older attempt's failure past its TTL is forgotten"
    first = started(
        None, seq=1, attempt=1, id="a", nodeclaims=(), now=now, timeout_seconds=60, ttl_seconds=180, members=3
    )
    assert (first.rollbacks, first.level, first.avoid, first.last_failure) == (0, 0, (), "")


def test_a_rollback_backs_off_only_for_failures_that_cost_machine_time() -> None:
    from controller.gang.record import BROKEN_OFFERING_AVOID_SECONDS, rolled_back

    pending = Record(seq=2, attempt=1, id="a", phase=PROVISIONING, nodeclaims=("n0",), level=2, rollbacks=2)
    knobs = {"backoff_base_seconds": 30.0, "backoff_max_seconds": 600.0, "ttl_seconds": 180.0}
    broken, delay = rolled_back(
        pending, seq=3, now=T0, message="m", failed_offerings=["t/z/od"], backoff=True, capacity_only=False, **knobs
    )
    assert (broken.phase, broken.rollbacks, broken.level, delay) == (ROLLED_BACK, 3, 3, 120.0)
    assert broken.retry_at == T0 + timedelta(seconds=120)
    assert broken.avoid == (Avoided("t/z/od", T0 + timedelta(seconds=BROKEN_OFFERING_AVOID_SECONDS), 1),)
    short, delay = rolled_back(
        pending, seq=3, now=T0, message="m", failed_offerings=["t/z/od"], backoff=True, capacity_only=True, **knobs
    )
    assert (short.rollbacks, short.level, delay, short.retry_at) == (3, 2, 0.0, T0)
    assert short.avoid == (Avoided("t/z/od", T0 + timedelta(seconds=180), 1),)
    interrupted, delay = rolled_back(
        pending, seq=3, now=T0, message="m", failed_offerings=[], backoff=False, capacity_only=False, **knobs
    )
    assert (interrupted.rollbacks, interrupted.level, delay) == (2, 2, 0.0)


def test_replans_admission_and_a_lost_member_rewrite_the_record() -> None:
    from controller.gang.record import admitted_record, replanned, without

    pending = Record(seq=2, attempt=1, id="a", phase=PROVISIONING, nodeclaims=("n0", "n1"), started=T0, rollbacks=1)
    again = replanned(pending, seq=3, nodeclaims=("n0", "n2"), last_failure="refused", avoid=(Avoided("o"),))
    assert (again.seq, again.nodeclaims, again.replans, again.last_failure, again.attempt) == (
        3,
        ("n0", "n2"),
        1,
        "refused",
        1,
    )
    running = Record(seq=1, attempt=0, id="r", phase=ADMITTED, nodeclaims=("m0", "m1"))
    done = admitted_record(again, running, seq=4, now=T0, live={"m0"})
    assert (done.phase, done.seq, done.nodeclaims, done.admitted_at, done.replans, done.rollbacks) == (
        ADMITTED,
        4,
        ("n0", "n2", "m0"),
        T0,
        1,
        1,
    )
    assert without(done, {"n2"}, seq=5).nodeclaims == ("n0", "m0")

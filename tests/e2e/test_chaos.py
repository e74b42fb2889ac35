"""A short run of the fault suite (`make chaos` runs the long one): the controller is killed with
SIGKILL three times and kube-apiserver once (etcd compacted while it is down) while a mixed GPU
workload with a gang is provisioned; the cheapest offerings are out of capacity, and on top of that
the seeded launch fault rates (30 % of offerings out of capacity in any minute, 10 % of launch calls
throttled, 2 s launch latency, 5 % of machines never register, 5 % never become Ready). Nothing may be
lost, bought twice or half-started."""

from __future__ import annotations

from pathlib import Path

from hack.chaos import execute, plan_run
from tests.e2e.harness import Cluster


def test_kills_and_an_apiserver_restart_lose_nothing_and_buy_nothing_twice(cluster: Cluster, tmp_path: Path) -> None:
    run = execute(cluster, plan_run(7, kills=3, apiserver=True, rates=True), logs=tmp_path)
    assert run.rates
    assert run.seconds is not None, run.checks
    broken = {check: why for check, why in run.checks.items() if why}
    assert not broken, f"{broken}; controller logs in {tmp_path}"
    assert set(run.checks) == {
        "every pod Running",
        "NodeClaims = Nodes, none empty",
        "nothing bought twice",
        "gang all or nothing",
    }
    assert run.compacted is not None  # etcd was compacted while the apiserver was down

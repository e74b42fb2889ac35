"""The fault suite: the real controller on the local KWOK cluster, killed and starved on purpose.

    .venv/bin/python -m hack.chaos [--seed 1] [--runs 5] [--kills 4] [--consolidation-kills 2]   # make chaos
    .venv/bin/python -m hack.chaos --seed 7 --runs 1 --repeat 10 --kills 3 --apiserver always --fault-rates

Each run submits a mixed GPU workload — 24 CPU web pods, 6 one-GPU L4 inference pods spread over
three zones, and a 4-member gang of 8-GPU H100 pods (gated, all or nothing) — while faults are
injected at seeded moments:

* the controller is killed with SIGKILL ``--kills`` times in the first seconds (while it batches,
  solves, writes NodeClaims, launches, admits the gang) and restarted after a seeded pause;
* every other run, kube-apiserver is killed with SIGKILL and restarted with the same command line
  (every watch breaks; the informers must relist and carry on);
* the cheapest offerings are out of capacity (KWOKNodeClass ``failures.insufficientCapacity``:
  L4 spot in one zone, the H100 reserved offering), so launches fail and fall back;
* with ``--fault-rates``, seeded launch faults on top (KWOKNodeClass failure rates, drawn from the
  run's seed): 30 % of offerings are out of capacity in any minute, 10 % of launch calls are throttled
  (retried with backoff), every launch takes up to 2 s, 5 % of machines never register and 5 %
  never become Ready (the lifecycle's 20 s timeouts replace them);
* with ``--consolidation-kills N``, a second phase once every pod runs: ``web`` is scaled from 24
  to 5 (quick disruption passes), so consolidation deletes and replaces CPU nodes, and the
  controller is SIGKILLed N times, each a seeded moment after the objects show a command under
  way; the invariants are checked again once consolidation has settled;
* with the apiserver restart, etcd is compacted while the apiserver is down, so nothing can resume
  from a resourceVersion older than the restart (joiner's informers relist after any broken watch;
  a real 410 Gone on a resumed watch is tests/e2e/test_watch_expiry.py).

When every pod runs (or the run's deadline passes), the run is judged by what a user would check:

* every pod is Running;
* every NodeClaim is Initialized with its Node, every joiner Node has its NodeClaim, and no node
  is left empty (nothing bought without a purpose);
* nothing was bought twice: no more NodeClaims than one offline plan (``joiner plan``) of the pods,
  or, where a failed launch was re-planned on other offerings and more NodeClaims stand, none of them
  is spare (``joiner plan`` of the Nodes without it still buys something for its pods);
* the gang never started partially: no member was bound before every NodeClaim it runs on was
  Initialized, and all members were bound within a few seconds of each other.

It prints one line per run and a table of the faults and what held; the exit status is 1 if any
invariant broke. ``tests/e2e/test_chaos.py`` runs one short seeded run in the test suite.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.e2e.harness import CLUSTER_DIR, JOINER_KINDS, ROOT, Cluster, clean_cluster
from tests.e2e.joiner import Joiner
from tests.e2e.manifests import offline_plan

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
GANG_GATE = "joiner.sh/gang"
GANG_SIZE = 4
# long enough for a gang that lost every offering it fits to refusals (30 % of offerings are out
# of capacity in any minute) to wait out the 3 min they are avoided and launch, or that drew ten
# attempts in a row that failed: with the fault rates about half of the gang's attempts do (each of
# its four machines may never register or never be Ready, 5 % each, and its offering may be out of
# capacity), at 20 s each and a backoff of 10, 20, 40 s, then 60 s between attempts. At 420 s and
# backoffs doubling to 10 min, 2 of 9 CI runs ended with the gang still on its sixth or seventh try.
RUN_TIMEOUT = 900.0
GANG_BIND_SPREAD = 5.0  # seconds between the first and last member bound
NODEPOOL_LABEL = "joiner.sh/nodepool"
WEB = 24  # CPU web replicas in the workload
WEB_AFTER = 5  # ... after the consolidation phase's scale-down
REPLACEMENT_FOR = "joiner.sh/disruption-replacement-for"
# the consolidation phase: quick disruption passes, so a replace happens within seconds of the scale-down
FAST_DISRUPTION = {"disruption-poll-interval": "2", "disruption-validation-delay": "3"}
SIGN_TIMEOUT = 30.0  # seconds to wait for a sign of a disruption command before killing anyway
SETTLE_TIMEOUT = 180.0
REPLACE_TIMEOUT = 90.0  # before the first judgement: a consolidation command started during the run ends
SETTLE_QUIET = 12.0  # the NodeClaims unchanged this long (several disruption passes): consolidation is done


# --- the cluster and what runs on it -----------------------------------------------------------


def cluster_up() -> Cluster:
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True, cwd=ROOT)
    handle = Cluster(kubeconfig=CLUSTER_DIR / "kubeconfig", bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()))
    handle.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    for crd in JOINER_KINDS:
        handle.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return handle


def _ref() -> Obj:
    return {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}


def _pool(name: str, requirements: list[Obj], *, taint: bool) -> Obj:
    spec: Obj = {"nodeClassRef": _ref(), "requirements": requirements}
    if taint:
        spec["taints"] = [{"key": GPU, "effect": "NoSchedule"}]
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    }


FAULT_RATES: dict[str, Any] = {
    "insufficientCapacityRate": 0.3,
    "throttleRate": 0.1,
    "launchLatency": "2s",
    "neverRegisterRate": 0.05,
    "neverReadyRate": 0.05,
}


def setup_objects(seed: int = 0, *, rates: bool = False) -> list[Obj]:
    nodeclass = {
        "apiVersion": "joiner.sh/v1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "registrationDelay": "1s",
            "failures": {
                "insufficientCapacity": [
                    {"instanceType": "g6.xlarge", "zone": "us-east-1a", "capacityType": "spot"},
                    {"instanceType": "p5.48xlarge", "capacityType": "reserved"},
                ],
                **(FAULT_RATES if rates else {}),
                "seed": seed,
            },
        },
    }
    gpu_count = "joiner.sh/gpu-count"
    return [
        nodeclass,
        _pool("cpu", [{"key": gpu_count, "operator": "DoesNotExist"}], taint=False),
        _pool("l4", [{"key": "joiner.sh/gpu-name", "operator": "In", "values": ["L4"]}], taint=True),
        _pool("h100", [{"key": "joiner.sh/gpu-name", "operator": "In", "values": ["H100"]}], taint=True),
    ]


def _container(cpu: str, memory: str, gpus: int = 0) -> Obj:
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    return {"name": "main", "image": "example.com/app:1", "resources": {"requests": requests, "limits": limits}}


def _deployment(name: str, ns: str, replicas: int, spec: Obj) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"terminationGracePeriodSeconds": 0, **spec}},
        },
    }


def workloads(ns: str) -> list[Obj]:
    toleration = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    web = _deployment("web", ns, WEB, {"containers": [_container("500m", "1Gi")]})
    infer = _deployment(
        "infer",
        ns,
        6,
        {
            "containers": [_container("3", "12Gi", 1)],
            "nodeSelector": {"joiner.sh/gpu-name": "L4"},
            "tolerations": toleration,
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "infer"}},
                }
            ],
        },
    )
    gang = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"trainer-{i}",
                "namespace": ns,
                "labels": {GANG_GATE: "trainer", "app": "trainer"},
                "annotations": {"joiner.sh/gang-size": str(GANG_SIZE)},
            },
            "spec": {
                "schedulingGates": [{"name": GANG_GATE}],
                "nodeSelector": {"joiner.sh/gpu-name": "H100"},
                "tolerations": toleration,
                "terminationGracePeriodSeconds": 0,
                "containers": [_container("8", "64Gi", 8)],
            },
        }
        for i in range(GANG_SIZE)
    ]
    return [web, infer, *gang]


def expected_pods(web: int = WEB) -> int:
    return web + 6 + GANG_SIZE


def offline_nodeclaims(setup: list[Obj], work: list[Obj]) -> int:
    """How many NodeClaims one offline plan of these pods buys (`joiner plan`)."""
    return len(offline_plan(setup, work)["nodeClaims"])


def unneeded_nodes(setup: list[Obj], pods: list[Obj], nodes: list[Obj]) -> list[str]:
    """The joiner Nodes whose pods one offline plan places on the other Nodes without buying
    anything: each Node is left out in turn and its pods planned as pending (`joiner plan` with the
    Nodes and the bound pods, so topology spread and taints count as kube-scheduler counts them)."""
    unneeded: list[str] = []
    for node in nodes:
        name = node["metadata"]["name"]
        if NODEPOOL_LABEL not in (node["metadata"].get("labels") or {}):
            continue
        on_it = [p for p in pods if p["spec"].get("nodeName") == name]
        if not on_it:
            continue  # an empty node is its own finding ("none empty")
        others = [n for n in nodes if n["metadata"]["name"] != name]
        rest = [p for p in pods if p["spec"].get("nodeName") != name]
        plan = offline_plan(setup, [*others, *rest, *(_pending(p) for p in on_it)])
        if not plan["nodeClaims"] and not plan["unschedulable"]:
            unneeded.append(name)
    return unneeded


def _pending(pod: Obj) -> Obj:
    """The pod as it was before it was bound: no node, no status."""
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"], "spec": spec}


# --- faults ------------------------------------------------------------------------------------


def compact_etcd(etcd: str) -> int | None:
    """Compact etcd at its current revision (its v3 JSON gateway); the revision, or None if it failed."""
    import base64
    import json
    import urllib.request

    def post(path: str, body: Obj) -> Obj:
        req = urllib.request.Request(f"{etcd}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            answer: Obj = json.loads(resp.read())
            return answer

    try:
        key = base64.b64encode(b"/registry").decode()
        revision = int(post("/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    except (OSError, ValueError, KeyError) as err:
        print(f"    etcd compaction failed: {err}", file=sys.stderr)
        return None
    return revision


def _exited(pid: int) -> bool:
    """The process is gone, or a zombie whose every thread has exited (its parent has not reaped it
    yet; a multi-threaded leader shows as a zombie while its other threads still hold its sockets)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z" and len(tasks) <= 1


def _port_free(argv: list[str], *, timeout: float = 15.0) -> None:
    """Wait until the apiserver's address can be bound again."""
    import socket

    flags = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    address = (flags.get("--bind-address", "127.0.0.1"), int(flags.get("--secure-port", "6443")))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                return
            except OSError:
                time.sleep(0.1)


def restart_apiserver(
    *, compact: bool = True, graceful: bool = False, flags: dict[str, str | None] | None = None
) -> int | None:
    """Stop kube-apiserver, compact etcd while it is down (nothing can then resume from a
    resourceVersion older than the restart), and start it again with the same command line.

    ``graceful``: SIGTERM instead of SIGKILL, so an apiserver that drains its watches
    (``--shutdown-watch-termination-grace-period``) ends each one cleanly and its clients resume
    from their last resourceVersion. ``flags``: command-line flags to set (a value) or drop (None)
    for the new process. Returns the compaction revision (None when not compacted)."""
    pid_file = CLUSTER_DIR / "pids" / "kube-apiserver"
    pid = int(pid_file.read_text().strip())
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")]
    os.kill(pid, signal.SIGTERM if graceful else signal.SIGKILL)
    deadline = time.monotonic() + (90 if graceful else 10)
    while not _exited(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _exited(pid):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    _port_free(argv)
    for flag, value in (flags or {}).items():
        argv = [a for a in argv if a.split("=", 1)[0] != flag]
        if value is not None:
            argv.append(f"{flag}={value}")
    etcd = next((a.split("=", 1)[1] for a in argv if a.startswith("--etcd-servers=")), None)
    compacted = compact_etcd(etcd.split(",")[0]) if compact and etcd else None
    log = (CLUSTER_DIR / "logs" / "kube-apiserver.log").open("ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    pid_file.write_text(f"{proc.pid}\n")
    return compacted


def apiserver_ready(cluster: Cluster) -> bool:
    done = cluster.kubectl("get", "--raw", "/readyz", check=False)
    return done.returncode == 0


# --- a run -------------------------------------------------------------------------------------


@dataclass
class Phase:
    """What the consolidation phase saw: kills, the NodeClaims before and after, and the invariants."""

    killed_at: list[str] = field(default_factory=list)  # what was under way at each kill
    seconds: float | None = None  # scale-down to settled
    before: int = 0
    after: int = 0
    planned: int = 0  # NodeClaims one offline plan buys for what is left
    replacements: int = 0  # replacement NodeClaims created during the phase
    checks: dict[str, str] = field(default_factory=dict)


@dataclass
class Run:
    seed: int
    kills: list[float]
    pauses: list[float]
    apiserver_at: float | None
    seconds: float | None = None
    bought: int = 0
    planned: int = 0
    checks: dict[str, str] = field(default_factory=dict)  # invariant -> "" when it held, else why not
    compacted: int | None = None  # the etcd revision compacted during the apiserver restart
    rates: bool = False  # KWOKNodeClass fault rates on
    # the consolidation phase (after every pod runs, web is scaled down to WEB_AFTER): per kill, the
    # seconds after a sign of a disruption command (a replacement or a candidate marked) and the pause
    consolidation_kills: list[float] = field(default_factory=list)
    consolidation_pauses: list[float] = field(default_factory=list)
    consolidation: Phase | None = None

    @property
    def held(self) -> bool:
        phase = self.consolidation.checks.values() if self.consolidation is not None else ()
        return all(not why for why in [*self.checks.values(), *phase])


def plan_run(seed: int, *, kills: int, apiserver: bool, consolidation_kills: int = 0, rates: bool = False) -> Run:
    rnd = random.Random(seed)
    times = sorted(rnd.uniform(0.3, 10.0) for _ in range(kills))
    pauses = [rnd.uniform(0.0, 1.5) for _ in range(kills)]
    at = rnd.uniform(1.0, 8.0) if apiserver else None
    # drawn after the first phase's, so adding the phase leaves that schedule as it was
    after_sign = [rnd.uniform(0.0, 2.5) for _ in range(consolidation_kills)]
    consolidation_pauses = [rnd.uniform(0.0, 1.5) for _ in range(consolidation_kills)]
    return Run(
        seed=seed,
        kills=times,
        pauses=pauses,
        apiserver_at=at,
        consolidation_kills=after_sign,
        consolidation_pauses=consolidation_pauses,
        rates=rates,
    )


def _stamp(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def _condition(obj: Obj, ctype: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def _all_running(cluster: Cluster, ns: str, *, web: int = WEB) -> bool:
    pods = [p for p in cluster.items("pods", namespace=ns) if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == expected_pods(web) and all((p.get("status") or {}).get("phase") == "Running" for p in pods)


def execute(cluster: Cluster, run: Run, *, logs: Path) -> Run:
    clean_cluster(cluster)
    setup = setup_objects(run.seed, rates=run.rates)
    cluster.apply(setup)
    joiner = Joiner(
        cluster=cluster,
        log_path=logs / f"joiner-{run.seed}.log",
        # the lifecycle's timeouts and the gang's backoff shortened alike, so a run's minutes hold
        # several failed machines in a row: each costs 20 s and a backoff of 10, 20, 40, 60, 60 s ...
        flags={
            "registration-timeout": "20",
            "initialization-timeout": "20",
            "gang-backoff": "10",
            "gang-backoff-max": "60",
        },
    ).start()
    ns = cluster.create_namespace(f"chaos-{run.seed}-{int(time.time()) % 100000}")
    work = workloads(ns)
    started = time.monotonic()
    cluster.apply(work)
    events = sorted(
        [(t, "kill", i) for i, t in enumerate(run.kills)]
        + ([(run.apiserver_at, "apiserver", 0)] if run.apiserver_at else [])
    )
    try:
        for at, what, i in events:
            time.sleep(max(0.0, started + at - time.monotonic()))
            if what == "kill":
                joiner.stop(kill=True)
                time.sleep(run.pauses[i])
                joiner.start()
            else:
                run.compacted = restart_apiserver()
                deadline = time.monotonic() + 60
                while not apiserver_ready(cluster) and time.monotonic() < deadline:
                    time.sleep(0.2)
        deadline = started + RUN_TIMEOUT
        while time.monotonic() < deadline:
            if _all_running(cluster, ns):
                run.seconds = time.monotonic() - started
                break
            time.sleep(1.0)
        time.sleep(3.0)  # let the lifecycle and GC finish what the last restart left
        # a run that waits long (a gang waiting out refused offerings) can see consolidation start a
        # replace; its replacement and the node it replaces stand for one machine until the replace ends
        settle = time.monotonic() + REPLACE_TIMEOUT
        while time.monotonic() < settle and _disruption_under_way(
            cluster.items("nodeclaims.joiner.sh"), deletions=False
        ):
            time.sleep(1.0)
        judge(cluster, run, ns=ns, setup=setup, work=work)
        if run.consolidation_kills and run.seconds is not None:
            run.consolidation = consolidate(cluster, joiner, run, ns=ns, setup=setup, work=work)
    finally:
        joiner.stop()
    return run


def _disruption_under_way(claims: list[Obj], *, deletions: bool = True) -> str | None:
    """What a disruption command is doing right now, as far as the objects show, or None.
    ``deletions=False``: a NodeClaim being deleted counts only when a command marked it."""
    for c in claims:
        name = c["metadata"]["name"]
        replaces = (c["metadata"].get("annotations") or {}).get(REPLACEMENT_FOR)
        initialized = (_condition(c, "Initialized") or {}).get("status") == "True"
        if replaces and not initialized:
            return f"replacement {name} for {replaces} coming up"
        if (_condition(c, "DisruptionReason") or {}).get("status") == "True":
            return f"{name} marked for disruption ({(_condition(c, 'DisruptionReason') or {}).get('reason')})"
        if deletions and c["metadata"].get("deletionTimestamp"):
            return f"{name} being deleted"
    return None


def _settled(cluster: Cluster, ns: str) -> tuple[bool, list[Obj]]:
    claims = cluster.items("nodeclaims.joiner.sh")
    busy = _disruption_under_way(claims) is not None or any(
        (_condition(c, "Initialized") or {}).get("status") != "True" for c in claims
    )
    return (not busy and _all_running(cluster, ns, web=WEB_AFTER)), claims


def consolidate(cluster: Cluster, joiner: Joiner, run: Run, *, ns: str, setup: list[Obj], work: list[Obj]) -> Phase:
    """Scale web down so consolidation deletes and replaces nodes, SIGKILL the controller at seeded
    moments while a command is under way, then judge what is left once consolidation has settled."""
    phase = Phase(before=len(cluster.items("nodeclaims.joiner.sh")))
    joiner.stop()  # a clean restart with quick disruption passes
    joiner.flags.update(FAST_DISRUPTION)
    joiner.start()
    seen_replacements: set[str] = set()

    def note_replacements(claims: list[Obj]) -> None:
        for c in claims:
            if (c["metadata"].get("annotations") or {}).get(REPLACEMENT_FOR):
                seen_replacements.add(c["metadata"]["name"])

    started = time.monotonic()
    cluster.kubectl("scale", "deployment/web", f"--replicas={WEB_AFTER}", "-n", ns)
    for after, pause in zip(run.consolidation_kills, run.consolidation_pauses, strict=True):
        deadline = time.monotonic() + SIGN_TIMEOUT
        what: str | None = None
        while time.monotonic() < deadline:
            claims = cluster.items("nodeclaims.joiner.sh")
            note_replacements(claims)
            what = _disruption_under_way(claims)
            if what is not None:
                break
            time.sleep(0.2)
        time.sleep(after)
        claims = cluster.items("nodeclaims.joiner.sh")
        note_replacements(claims)
        now = _disruption_under_way(claims)
        phase.killed_at.append(
            f"{time.monotonic() - started:.1f} s: {now or 'the objects show nothing under way'}"
            + ("" if what is not None else " (no command seen within the wait)")
        )
        joiner.stop(kill=True)
        time.sleep(pause)
        joiner.start()
    deadline = time.monotonic() + SETTLE_TIMEOUT
    quiet_since: float | None = None
    last: tuple[str, ...] = ()
    while time.monotonic() < deadline:
        settled, claims = _settled(cluster, ns)
        note_replacements(claims)
        names = tuple(sorted(c["metadata"]["name"] for c in claims))
        if not settled or names != last:
            quiet_since, last = None, names
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_QUIET:
            phase.seconds = quiet_since - started
            break
        time.sleep(1.0)
    phase.replacements = len(seen_replacements)
    left = [_scaled(o, WEB_AFTER) for o in work]
    judged = Run(seed=run.seed, kills=[], pauses=[], apiserver_at=None)
    judge(cluster, judged, ns=ns, setup=setup, work=left, web=WEB_AFTER)
    phase.checks = {f"after consolidation: {k}": v for k, v in judged.checks.items() if k != "gang all or nothing"}
    if phase.seconds is None:
        phase.checks["after consolidation: settled"] = f"still moving after {SETTLE_TIMEOUT:.0f} s"
    phase.after, phase.planned = judged.bought, judged.planned
    if phase.after > phase.before:
        phase.checks["after consolidation: nothing bought twice"] = (
            f"{phase.after} NodeClaims after consolidation, {phase.before} before it"
        )
    return phase


def _scaled(obj: Obj, replicas: int) -> Obj:
    if obj.get("kind") == "Deployment" and obj["metadata"]["name"] == "web":
        return {**obj, "spec": {**obj["spec"], "replicas": replicas}}
    return obj


def judge(cluster: Cluster, run: Run, *, ns: str, setup: list[Obj], work: list[Obj], web: int = WEB) -> None:
    pods = [p for p in cluster.items("pods", namespace=ns) if not p["metadata"].get("deletionTimestamp")]
    claims = cluster.items("nodeclaims.joiner.sh")
    nodes = {n["metadata"]["name"]: n for n in cluster.items("nodes")}
    not_running = [p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") != "Running"]
    run.checks["every pod Running"] = (
        ""
        if len(pods) == expected_pods(web) and not not_running
        else f"{len(pods)} pods, {len(not_running)} not Running: {not_running[:5]}"
    )

    problems: list[str] = []
    claimed_nodes = set()
    for c in claims:
        name = c["metadata"]["name"]
        node = (c.get("status") or {}).get("nodeName")
        if c["metadata"].get("deletionTimestamp"):
            problems.append(f"{name} still being deleted")
        elif not node or node not in nodes:
            problems.append(f"{name} has no Node")
        elif (_condition(c, "Initialized") or {}).get("status") != "True":
            problems.append(f"{name} not Initialized")
        if node:
            claimed_nodes.add(node)
    for name, node in nodes.items():
        if NODEPOOL_LABEL in (node["metadata"].get("labels") or {}) and name not in claimed_nodes:
            problems.append(f"Node {name} has no NodeClaim")
    used = {p["spec"].get("nodeName") for p in pods}
    empty = sorted(n for n in claimed_nodes if n not in used)
    if empty:
        problems.append(f"empty nodes {empty}")
    run.checks["NodeClaims = Nodes, none empty"] = "; ".join(problems)

    planned = offline_nodeclaims(setup, work)
    run.bought, run.planned = len(claims), planned
    twice = ""
    if len(claims) > planned:
        # more than one plan buys is a double buy only if capacity is left over: a launch that failed
        # (refused, never registered, never Ready) is re-planned without its offering, and the next
        # cheapest may be two smaller machines where the plan had one; none of those is spare
        spare = unneeded_nodes(setup, pods, list(nodes.values()))
        if spare:
            twice = (
                f"{len(claims)} NodeClaims, one plan buys {planned}; not needed: {', '.join(spare)} "
                "(joiner plan places their pods on the other nodes without buying)"
            )
    run.checks["nothing bought twice"] = twice

    gang = [p for p in pods if p["metadata"]["name"].startswith("trainer-")]
    why = ""
    binds = [_stamp((_condition(p, "PodScheduled") or {}).get("lastTransitionTime")) for p in gang]
    if len(gang) != GANG_SIZE or any(b is None for b in binds) or any(not p["spec"].get("nodeName") for p in gang):
        why = "not every member was bound"
    else:
        bound = [b for b in binds if b is not None]
        by_node = {(c.get("status") or {}).get("nodeName"): c for c in claims}
        ready = [
            _stamp((_condition(by_node[p["spec"]["nodeName"]], "Initialized") or {}).get("lastTransitionTime"))
            for p in gang
            if p["spec"]["nodeName"] in by_node
        ]
        if len(ready) != GANG_SIZE or any(r is None for r in ready):
            why = "a member's node has no Initialized NodeClaim"
        elif min(bound) + 1.0 < max(r for r in ready if r is not None):  # stamps are whole seconds
            why = "a member was bound before every node of the gang was Initialized"
        elif max(bound) - min(bound) > GANG_BIND_SPREAD:
            why = f"members bound {max(bound) - min(bound):.0f} s apart"
    run.checks["gang all or nothing"] = why


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1, help="the first run's seed; run i uses seed + i")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kills", type=int, default=4, help="controller SIGKILLs per run")
    parser.add_argument(
        "--fault-rates",
        action="store_true",
        help="also inject seeded launch faults: random insufficient capacity, throttling, latency, "
        "never-register and never-Ready machines",
    )
    parser.add_argument(
        "--consolidation-kills",
        type=int,
        default=0,
        help="after every pod runs, scale web down so consolidation deletes and replaces nodes, and "
        "SIGKILL the controller this many times while its commands are under way (0: no such phase)",
    )
    parser.add_argument(
        "--apiserver",
        choices=("alternate", "always", "never"),
        default="alternate",
        help="when kube-apiserver is restarted mid-run: every other run (the default), in every run, or never",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each seed this many times (the same faults at the same moments; what differs is the "
        "timing of everything else, which is where the rare failures are)",
    )
    parser.add_argument("--logs", type=Path, help="where the controller logs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="joiner-chaos-"))
    logs.mkdir(parents=True, exist_ok=True)
    cluster = cluster_up()
    runs: list[Run] = []
    for n in range(args.runs * args.repeat):
        i, again = divmod(n, args.repeat)
        restart = {"alternate": i % 2 == 1, "always": True, "never": False}[args.apiserver]
        run = plan_run(
            args.seed + i,
            kills=args.kills,
            apiserver=restart,
            consolidation_kills=args.consolidation_kills,
            rates=args.fault_rates,
        )
        where = logs / f"seed-{run.seed}-try-{again + 1}" if args.repeat > 1 else logs
        where.mkdir(parents=True, exist_ok=True)
        execute(cluster, run, logs=where)
        runs.append(run)
        took = f"{run.seconds:.1f} s" if run.seconds is not None else f"not all Running in {RUN_TIMEOUT:.0f} s"
        faults = f"kills at {', '.join(f'{t:.1f}' for t in run.kills)} s"
        if run.apiserver_at is not None:
            faults += f"; apiserver restart at {run.apiserver_at:.1f} s"
            faults += f" (etcd compacted at {run.compacted})" if run.compacted is not None else ""
        if run.rates:
            faults += "; launch fault rates"
        print(
            f"run seed={run.seed}: {faults}; all Running after {took}; "
            f"{run.bought} NodeClaims (one plan: {run.planned}); {'held' if run.held else 'BROKEN'}"
        )
        for check, why in run.checks.items():
            if why:
                print(f"    {check}: {why}")
        phase = run.consolidation
        if phase is not None:
            settled = f"settled after {phase.seconds:.1f} s" if phase.seconds is not None else "never settled"
            print(
                f"    consolidation: web {WEB} -> {WEB_AFTER}, {len(phase.killed_at)} kills, {settled}; "
                f"{phase.before} -> {phase.after} NodeClaims (one plan: {phase.planned}), "
                f"{phase.replacements} replacement(s)"
            )
            for kill in phase.killed_at:
                print(f"      kill at {kill}")
            for check, why in phase.checks.items():
                if why:
                    print(f"    {check}: {why}")
    clean_cluster(cluster)
    kills = sum(len(r.kills) + len(r.consolidation_kills) for r in runs)
    restarts = sum(1 for r in runs if r.apiserver_at is not None)
    print(f"\n{len(runs)} runs, {kills} controller kills, {restarts} apiserver restarts; logs in {logs}")
    for check in runs[0].checks if runs else []:
        held = sum(1 for r in runs if not r.checks.get(check))
        print(f"  {check:<34} held in {held}/{len(runs)}")
    phased = [r.consolidation for r in runs if r.consolidation is not None]
    for check in sorted({c for p in phased for c in p.checks}):
        held = sum(1 for p in phased if not p.checks.get(check))
        print(f"  {check:<34} held in {held}/{len(phased)}")
    return 0 if all(r.held for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

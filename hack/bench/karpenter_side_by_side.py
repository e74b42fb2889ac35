"""Karpenter's own scheduling benchmark and joiner's solver on the same workload, in one sitting.

    .venv/bin/python -m hack.bench.karpenter_side_by_side [--sizes 1000,5000] [--procs 1,2]
                                                          [--skip-karpenter] [--repeat 1]

(a) **Karpenter**: fetches ``sigs.k8s.io/karpenter@v1.15.0`` from the Go module proxy, copies it out
of the module cache to a writable directory under ``~/.cache/joiner/karpenter-bench`` (or
``$JOINER_CACHE_DIR``), lowers its ``go`` line to the local toolchain (v1.15.0 asks for 1.26.9),
adds ``hack/bench/karpenter/joiner_cost_test.go`` (it prints the NodeClaims' $/h, which the Go
benchmark does not), and builds the package's test binary once (``-tags test_performance``; the
binary is cached by version and by that file's hash). Then, per size and per ``GOMAXPROCS``, it
runs ``BenchmarkScheduling<size>`` once (``-test.benchtime=1x``) and the cost test once.

(b) **joiner**: the same mix (:mod:`hack.bench.karpenter_workload`): the solve alone (pods already
converted, best of ``--repeat``), and the whole ``joiner plan -f scenario.yaml --catalog
catalog.json -o json`` as a subprocess (parsing, input building, solve, output; best of
``--repeat``, with joiner's bytecode compiled first, as an installed package has it). Every joiner plan
is replayed through :mod:`hack.bench.checker`; its violation count is printed beside the figures.

Karpenter's sizes are its benchmark functions: 1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from controller.scheduling import Plan, solve
from hack.bench.checker import check_plan, summarize
from hack.bench.karpenter_workload import karpenter_catalog, karpenter_pods, karpenter_pool, write_scenario

VERSION = "v1.15.0"
MODULE = "sigs.k8s.io/karpenter"
PACKAGE = "pkg/controllers/provisioning/scheduling"
KARPENTER_SIZES = (1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000)
COST_TEST = Path(__file__).resolve().parent / "karpenter" / "joiner_cost_test.go"
REPO = Path(__file__).resolve().parents[2]


def _cache() -> Path:
    root = os.environ.get("JOINER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "joiner"
    )
    return Path(root) / "karpenter-bench"


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}


def build_karpenter() -> tuple[Path, Path]:
    """(test binary, package directory to run it in), built once and cached."""
    key = hashlib.sha256(COST_TEST.read_bytes()).hexdigest()[:12]
    home = _cache() / f"{VERSION}-{key}"
    binary = home / "scheduling.test"
    src = home / "src"
    if binary.exists() and (src / PACKAGE).is_dir():
        return binary, src / PACKAGE
    home.mkdir(parents=True, exist_ok=True)
    module_dir = module_source(MODULE, VERSION)
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(module_dir, src)
    for path in src.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    go_mod = src / "go.mod"
    local = _local_go()
    go_mod.write_text(re.sub(r"(?m)^go \d+\.\d+(\.\d+)?$", f"go {local}", go_mod.read_text()))
    shutil.copy(COST_TEST, src / PACKAGE / COST_TEST.name)
    print(f"building Karpenter {VERSION}'s scheduling benchmark (go {local}) in {src} ...", flush=True)
    subprocess.run(
        ["go", "test", "-c", "-tags", "test_performance", "-o", str(binary), f"./{PACKAGE}"],
        check=True,
        env=_go_env(),
        cwd=src,
    )
    return binary, src / PACKAGE


def module_source(module: str, version: str) -> Path:
    """Where the Go module proxy's copy of ``module@version`` is unpacked (read-only)."""
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env=_go_env(),
        cwd=tempfile.gettempdir(),
    )
    found = json.loads(info.stdout or "{}").get("Dir")
    if not found:  # go refuses the module's go line but has unpacked it all the same
        found = str(Path(os.environ.get("GOMODCACHE") or _gomodcache()) / f"{module}@{version}")
    if not Path(found).is_dir():
        raise SystemExit(f"could not download {module}@{version}: {info.stdout}{info.stderr}")
    return Path(found)


def _gomodcache() -> str:
    return subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()


def _local_go() -> str:
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    return out.removeprefix("go")


@dataclass(frozen=True)
class KarpenterRun:
    seconds: float
    cpu_seconds: float  # the benchmark process's CPU time (its setup included, not only Solve)
    nodes: int
    price: float
    a_by_zone: str
    nodes_by_zone: str


def run_karpenter(binary: Path, cwd: Path, size: int, procs: int) -> KarpenterRun:
    env = {**os.environ, "GOMAXPROCS": str(procs)}
    before = _children_cpu()
    bench = subprocess.run(
        [str(binary), "-test.run=^$", f"-test.bench=^BenchmarkScheduling{size}$", "-test.benchtime=1x"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=True,
    )
    line = next((x for x in bench.stdout.splitlines() if x.startswith(f"BenchmarkScheduling{size}")), "")
    match = re.search(r"\s(\d+(?:\.\d+)?) ns/op", line)
    if not match:
        raise SystemExit(f"unexpected benchmark output:\n{bench.stdout}\n{bench.stderr}")
    seconds = float(match.group(1)) / 1e9
    cpu = _children_cpu() - before
    cost = subprocess.run(
        [str(binary), "-test.run=^TestJoinerCost$"],
        capture_output=True,
        text=True,
        env={**env, "JOINER_SIZES": str(size)},
        cwd=cwd,
        check=True,
    )
    found = re.search(
        r"JOINER-COST pods=\d+ nodes=(\d+) price=([\d.]+) unschedulable=\d+ a-by-zone=(\S*) nodes-by-zone=(\S*)",
        cost.stdout,
    )
    if not found:
        raise SystemExit(f"unexpected cost output:\n{cost.stdout}\n{cost.stderr}")
    return KarpenterRun(seconds, cpu, int(found.group(1)), float(found.group(2)), found.group(3), found.group(4))


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class JoinerRun:
    solve_seconds: float
    solve_cpu_seconds: float
    command_seconds: float
    command_cpu_seconds: float
    plan: Plan
    violations: str
    a_by_zone: str
    nodes_by_zone: str


def compile_joiner() -> None:
    """Write the bytecode of joiner's own modules, as installing a package does: an editable
    install under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile every module on every run
    of the command (about 0.1 s of its start-up)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "controller"), str(REPO / "api")],
        check=True,
    )


def run_joiner(size: int, *, repeat: int, workdir: Path, kubectl: bool = False) -> JoinerRun:
    catalog = karpenter_catalog()
    pool = karpenter_pool(catalog)
    pods = karpenter_pods(size)
    times: list[tuple[float, float]] = []
    plan: Plan | None = None
    for _ in range(max(1, repeat)):
        started, cpu = time.perf_counter(), time.process_time()
        plan = solve(pods=pods, node_pools=[pool])
        times.append((time.perf_counter() - started, time.process_time() - cpu))
    assert plan is not None
    violations = summarize(check_plan(pods=pods, plan=plan, node_pools=[pool]))
    zone_of = {key: n.choice.zone for n in plan.new_nodes for key in n.pods}
    a_zones = Counter(zone_of.get(p.key, "?") for p in pods if p.labels.get("my-label") == "a")
    node_zones = Counter(n.choice.zone for n in plan.new_nodes)
    scenario, catalog_file = write_scenario(workdir, size, kubectl=kubectl)
    joiner = Path(sys.executable).with_name("joiner")
    runs: list[tuple[float, float]] = []
    for _ in range(max(1, repeat)):
        started, cpu_before = time.perf_counter(), _children_cpu()
        out = subprocess.run(
            [str(joiner), "plan", "-f", str(scenario), "--catalog", str(catalog_file), "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append((time.perf_counter() - started, _children_cpu() - cpu_before))
    command, command_cpu = min(runs)
    whole = json.loads(out.stdout)
    nodes = whole.get("nodeClaims")
    if isinstance(nodes, list) and len(nodes) != len(plan.new_nodes):
        print(f"  note: joiner plan bought {len(nodes)} nodes, the in-process solve {len(plan.new_nodes)}")

    def render(counts: Counter[str]) -> str:
        return ",".join(f"{k}:{v}" for k, v in sorted(counts.items()))

    best = min(times)
    return JoinerRun(best[0], best[1], command, command_cpu, plan, violations, render(a_zones), render(node_zones))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000", help="pod counts (20000 is slow on Karpenter's side)")
    parser.add_argument("--procs", default="1,2", help="GOMAXPROCS values for Karpenter")
    parser.add_argument(
        "--repeat", type=int, default=1, help="joiner solves and whole commands per size (the best is reported)"
    )
    parser.add_argument("--skip-karpenter", action="store_true", help="only joiner's side")
    parser.add_argument(
        "--kubectl",
        action="store_true",
        help="hand joiner plan the pods as `kubectl get pods -o yaml` prints them (a List of full, pending Pods)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    procs = [int(p) for p in args.procs.split(",") if p]
    bad = [s for s in sizes if s not in KARPENTER_SIZES and not args.skip_karpenter]
    if bad:
        parser.error(f"Karpenter has no benchmark for {bad}; pick from {KARPENTER_SIZES}")
    binary = cwd = None
    if not args.skip_karpenter:
        binary, cwd = build_karpenter()
    cpus = os.cpu_count()
    print(f"python {platform.python_version()}, {platform.machine()}, {cpus} CPUs; Karpenter {VERSION}")
    print(f"load average at the start: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows = []
    compile_joiner()
    with tempfile.TemporaryDirectory(prefix="joiner-karpenter-") as tmp:
        for size in sizes:
            karpenter = {}
            if binary is not None and cwd is not None:
                for p in procs:
                    karpenter[p] = run_karpenter(binary, cwd, size, p)
                    k = karpenter[p]
                    print(
                        f"  karpenter {size} pods GOMAXPROCS={p}: {k.seconds:.2f} s "
                        f"(process CPU {k.cpu_seconds:.2f} s, setup included), {k.nodes} nodes, "
                        f"${k.price:.2f}/h; my-label=a by zone {k.a_by_zone}; nodes by zone {k.nodes_by_zone}",
                        flush=True,
                    )
            j = run_joiner(size, repeat=args.repeat, workdir=Path(tmp), kubectl=args.kubectl)
            print(
                f"  joiner {size} pods: solve {j.solve_seconds:.2f} s (CPU {j.solve_cpu_seconds:.2f} s), "
                f"whole command {j.command_seconds:.2f} s (CPU {j.command_cpu_seconds:.2f} s), "
                f"{len(j.plan.new_nodes)} nodes, ${j.plan.total_price:.2f}/h, violations {j.violations}; "
                f"my-label=a by zone {j.a_by_zone}; nodes by zone {j.nodes_by_zone}",
                flush=True,
            )
            rows.append((size, karpenter, j))
            print(f"  load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print()
    head = f"{'pods':>6}"
    for p in procs if binary else ():
        head += f" {'K s P=' + str(p):>9} {'K pods/s':>9}"
    head += f" {'K nodes':>7} {'K $/h':>9} {'j solve s':>9} {'pods/s':>7} {'j cmd s':>8} {'pods/s':>7}"
    head += f" {'j nodes':>7} {'j $/h':>9}  violations"
    print(head)
    for size, karpenter, j in rows:
        line = f"{size:>6}"
        for p in procs if binary else ():
            k = karpenter[p]
            line += f" {k.seconds:>9.2f} {size / k.seconds:>9.0f}"
        ref = next(iter(karpenter.values()), None)
        line += f" {ref.nodes if ref else '-':>7} {f'{ref.price:.2f}' if ref else '-':>9}"
        line += f" {j.solve_seconds:>9.2f} {size / j.solve_seconds:>7.0f}"
        line += f" {j.command_seconds:>8.2f} {size / j.command_seconds:>7.0f}"
        line += f" {len(j.plan.new_nodes):>7} {j.plan.total_price:>9.2f}  {j.violations}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

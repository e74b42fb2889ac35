"""The timeline of one race run, as a picture: where the seconds from `kubectl apply` to all Running go.

    .venv/bin/python -m hack.bench.race --sides joiner --runs 1 --joiner-flag log-level=debug --dump DIR
    .venv/bin/python -m hack.bench.race_timeline DIR/joiner-<time> --out docs/race-timeline.png

From the run's objects (pods, their events, the NodeClaims and Nodes) and joiner's debug log it
draws, against seconds since the apply: pods created (the ReplicaSet controller), first tried and
refused by kube-scheduler (its first FailedScheduling Event), told the plan by joiner (the first
`provisioner.tolerated`: the toleration of its planned Node's reservation, or `provisioner.nominated`),
bound (PodScheduled) and Running (Ready); and each solve, each NodeClaim created, each Node created,
each planned Node opened (`nodeclaim.opened`) as marks on one line each.
It also prints the same as text. Condition times have one-second resolution (the apiserver's);
Events and joiner's log have microseconds.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


def _when(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def _condition(obj: Obj, kind: str) -> float | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return _when(c.get("lastTransitionTime"))
    return None


@dataclass
class Timeline:
    """Seconds since the apply of each step, per pod (series) and per decision (marks)."""

    series: dict[str, list[float]] = field(default_factory=dict)
    marks: dict[str, list[tuple[float, str]]] = field(default_factory=dict)


def timeline(where: Path) -> Timeline:
    objects = json.loads((where / "objects.json").read_text())
    start = float(objects["start"])
    out = Timeline()

    def since(t: float | None) -> float | None:
        return None if t is None else t - start

    def keep(values: Iterable[float | None]) -> list[float]:
        return sorted(v for v in values if v is not None)

    pods = objects["pods"]
    out.series["created"] = keep(since(_when(p["metadata"].get("creationTimestamp"))) for p in pods)
    refused: dict[str, float] = {}
    for event in objects.get("events", []):
        if event.get("reason") != "FailedScheduling":
            continue
        name = (event.get("regarding") or event.get("involvedObject") or {}).get("name", "")
        t = _when(event.get("eventTime") or event.get("firstTimestamp") or event["metadata"].get("creationTimestamp"))
        if t is not None and (name not in refused or t < refused[name]):
            refused[name] = t
    out.series["refused by kube-scheduler"] = keep(since(t) for t in refused.values())
    nominated: dict[str, float] = {}
    log_lines = (
        (where / "joiner.log").read_text(errors="replace").splitlines() if (where / "joiner.log").exists() else []
    )
    for line in log_lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        t = since(_when(entry.get("timestamp")))
        if t is None:
            continue
        kind = entry.get("event")
        if (kind == "provisioner.nominated" and entry.get("node")) or kind == "provisioner.tolerated":
            nominated.setdefault(str(entry.get("pod")), t)
        elif kind == "provisioner.solved":
            label = f"{entry.get('pods')} pods -> {entry.get('new_nodeclaims')} NodeClaims"
            out.marks.setdefault("solve", []).append((t, label))
        elif kind == "nodeclaim.created":
            out.marks.setdefault("NodeClaim created", []).append((t, str(entry.get("instance_type", ""))))
        elif kind == "nodeclaim.opened":
            out.marks.setdefault("planned Node opened", []).append((t, str(entry.get("planned", ""))))
    out.series["told the plan by joiner"] = sorted(nominated.values())
    out.series["bound"] = keep(since(_condition(p, "PodScheduled")) for p in pods)
    out.series["Running"] = keep(since(_condition(p, "Ready")) for p in pods)
    for node in objects.get("nodes", []):
        t = since(_when(node["metadata"].get("creationTimestamp")))
        if t is not None:
            out.marks.setdefault("Node created", []).append((t, node["metadata"]["name"]))
    return out


def describe(line: Timeline) -> str:
    rows = []
    for name, values in line.series.items():
        if values:
            rows.append(f"{name:<28} {len(values):>6} pods  first {values[0]:6.1f} s  last {values[-1]:6.1f} s")
    for name, marks in line.marks.items():
        times = sorted(t for t, _ in marks)
        rows.append(f"{name:<28} {len(marks):>6}       first {times[0]:6.1f} s  last {times[-1]:6.1f} s")
    return "\n".join(rows)


def draw(line: Timeline, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}, constrained_layout=True
    )
    for name, values in line.series.items():
        if values:
            top.step(values, range(1, len(values) + 1), where="post", label=f"{name} ({len(values):,})")
    top.set_ylabel("pods")
    top.legend(loc="upper left", fontsize=9)
    top.grid(alpha=0.3)
    top.set_title(title, fontsize=11)
    rows = list(line.marks)
    for i, name in enumerate(rows):
        times = [t for t, _ in line.marks[name]]
        bottom.scatter(times, [i] * len(times), marker="|", s=250)
    for t, label in line.marks.get("solve", []):
        bottom.annotate(label, (t, rows.index("solve")), textcoords="offset points", xytext=(4, 6), fontsize=8)
    bottom.set_yticks(range(len(rows)), rows, fontsize=9)
    bottom.set_ylim(-0.7, len(rows) - 0.3)
    bottom.grid(axis="x", alpha=0.3)
    bottom.set_xlabel("seconds since kubectl apply")
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run dumped by `hack.bench.race --dump` (joiner-<time>)")
    parser.add_argument("--out", type=Path, help="write the picture here (PNG)")
    parser.add_argument("--title", default="", help="the picture's title")
    args = parser.parse_args()
    line = timeline(args.run)
    print(describe(line))
    if args.out:
        draw(line, args.out, args.title or f"joiner, {len(line.series.get('created', []))} pods: {args.run.name}")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

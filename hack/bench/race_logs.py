"""What the race reads from the logs: the apiserver's audit log (requests by client, verb and
resource; when NodeClaims were stored; the Nodes' way from their creation to the pods bound there)
and each controller's own log (what its solves planned)."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


def _when(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def _first_plan_karpenter(log: str) -> tuple[int, int, int, int]:
    """(NodeClaims of the first solve that bought, its pods, solves after it that bought, NodeClaims of
    every solve together) from Karpenter's log."""
    counts: list[tuple[int, int]] = []
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if str(event.get("message", "")).startswith("computed new nodeclaim"):
                counts.append((int(event.get("nodeclaims", 0)), int(event.get("pods", 0))))
    first = counts[0] if counts else (0, 0)
    return first[0], first[1], max(0, len(counts) - 1), sum(c for c, _ in counts)


def _joiner_log(log: str) -> tuple[int, int, int, int, int]:
    """(first plan's NodeClaims, its pods, follow-up solves that bought, pods released, NodeClaims of every
    plan together) from joiner's log."""
    bought: list[tuple[int, int]] = []
    released = 0
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "provisioner.solved" and event.get("new_nodeclaims"):
                bought.append((int(event["new_nodeclaims"]), int(event["pods"])))
            elif event.get("event") == "provisioner.nomination_released":
                released += int(event.get("pods", 0))
    first = bought[0] if bought else (0, 0)
    return first[0], first[1], max(0, len(bought) - 1), released, sum(c for c, _ in bought)


def client_of(user_agent: str, username: str) -> str:
    """A short name for whoever sent a request: the program in its User-Agent (the controller's
    name for kube-controller-manager's controllers), else the user."""
    if not user_agent:
        return username or "?"
    program = user_agent.split("/", 1)[0]
    if program == "kube-controller-manager":
        tail = user_agent.rsplit("/", 1)[-1]
        return f"kcm/{tail}" if tail and " " not in tail else program
    if program.startswith("OpenAPI-Generator"):
        return "joiner"  # the kubernetes_asyncio client's default User-Agent (joiner before it set its own)
    if program in ("main", "kwok") or "kwok" in program:
        return program if program != "main" else (username or "?")
    return program


def _completed(
    path: Path, start: float, end: float, *, stamp: str = "stageTimestamp", keep: Callable[[str], bool] | None = None
) -> Iterator[tuple[dict[str, Any], float]]:
    """The audit log's ResponseComplete events from ``start`` to ``end`` (epoch seconds, by their
    ``stamp``), each with that time; ``keep`` looks at a line before it is parsed (a cheap filter)."""
    if not path.exists():
        return
    with path.open(errors="replace") as lines:
        for line in lines:
            if keep is not None and not keep(line):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("stage") != "ResponseComplete":
                continue
            when = _when(event.get(stamp))
            if when is not None and start <= when <= end:
                yield event, when


def _created(event: dict[str, Any], resource: str) -> bool:
    """Whether the event stored a new ``resource`` (a create answered 201, not of a subresource)."""
    ref = event.get("objectRef") or {}
    return (
        event.get("verb") == "create"
        and ref.get("resource") == resource
        and not ref.get("subresource")
        and (event.get("responseStatus") or {}).get("code") == 201
    )


def audit_counts(path: Path, start: float, end: float) -> tuple[Counter[str], Counter[tuple[str, str, str]]]:
    """Requests the apiserver's audit log (``JOINER_APISERVER_AUDIT=1``, see hack/cluster.sh) saw
    from ``start`` to ``end`` (epoch seconds), watches aside: by client, and by client, verb and
    resource[/subresource]."""
    clients: Counter[str] = Counter()
    calls: Counter[tuple[str, str, str]] = Counter()
    for event, _when_received in _completed(path, start, end, stamp="requestReceivedTimestamp"):
        if event.get("verb") == "watch":
            continue
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource") or event.get("requestURI", "?").split("?", 1)[0])
        if ref.get("subresource"):
            resource += f"/{ref['subresource']}"
        client = client_of(str(event.get("userAgent") or ""), str((event.get("user") or {}).get("username") or ""))
        clients[client] += 1
        calls[(client, str(event.get("verb")), resource)] += 1
    return clients, calls


def audit_creates(path: Path, start: float, end: float, resource: str) -> list[float]:
    """When the apiserver stored each ``resource`` created from ``start`` to ``end`` (epoch seconds,
    sorted): its audit log's ResponseComplete of the create. This process's own watch sees a
    NodeClaim later, the more the busier the machine (1.5 s late for the last of 156 NodeClaims on
    the GPU workload)."""
    lines = _completed(path, start, end, keep=lambda line: '"create"' in line and resource in line)
    return sorted(when for event, when in lines if _created(event, resource))


# kube-controller-manager's node lifecycle controller, as the audit log names it (`client_of`)
NODE_LIFECYCLE = "kcm/node-controller"


@dataclass
class NodeWay:
    """When the apiserver stored each step of the burst's Nodes, epoch seconds, sorted: each Node's
    creation; kube-controller-manager's first patch of it, which takes off the
    `node.kubernetes.io/not-ready:NoSchedule` taint the apiserver's TaintNodesByCondition admission put
    on it (no workload pod tolerates that taint: a pod is bound only after it); each pod's binding."""

    created: list[float] = field(default_factory=list)
    taint_off: list[float] = field(default_factory=list)
    bound: list[float] = field(default_factory=list)

    def taint_pace(self) -> float:
        """Nodes a second kube-controller-manager took the taint off at, first to last (0: fewer than 2)."""
        if len(self.taint_off) < 2 or self.taint_off[-1] <= self.taint_off[0]:
            return 0.0
        return (len(self.taint_off) - 1) / (self.taint_off[-1] - self.taint_off[0])

    def line(self, start: float) -> str:
        """One line of the run's timeline, in seconds after ``start`` (the apply)."""

        def span(times: list[float]) -> str:
            return f"{times[0] - start:.1f}-{times[-1] - start:.1f} s" if times else "-"

        return (
            f"Nodes created {span(self.created)} ({len(self.created)}), not-ready taint off {span(self.taint_off)} "
            f"({self.taint_pace():.1f} Nodes/s, kube-controller-manager), pods bound {span(self.bound)}"
        )


def audit_node_way(path: Path, start: float, end: float) -> NodeWay:
    """The Nodes' way from creation to their pods bound, from ``start`` to ``end`` (epoch seconds), as
    the apiserver's audit log saw it (``NodeWay``)."""
    way = NodeWay()
    taint_off: dict[str, float] = {}
    for event, when in _completed(path, start, end, keep=lambda line: '"nodes"' in line or '"binding"' in line):
        ref = event.get("objectRef") or {}
        if (event.get("responseStatus") or {}).get("code", 0) >= 300:
            continue
        if _created(event, "nodes"):
            way.created.append(when)
        elif event.get("verb") == "create" and ref.get("resource") == "pods" and ref.get("subresource") == "binding":
            way.bound.append(when)
        elif event.get("verb") == "patch" and ref.get("resource") == "nodes" and not ref.get("subresource"):
            user = str((event.get("user") or {}).get("username") or "")
            if ref.get("name") and client_of(str(event.get("userAgent") or ""), user) == NODE_LIFECYCLE:
                taint_off.setdefault(str(ref["name"]), when)
    way.created.sort()
    way.bound.sort()
    way.taint_off = sorted(taint_off.values())
    return way

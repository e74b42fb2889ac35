"""The process's own metrics: build info, when it started (restarts show as changes of the start
time), and controller loops the supervisor restarted after a crash."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from controller import metrics

BUILD_INFO = metrics.gauge(
    "joiner_build_info",
    "Always 1; the labels say which joiner runs: version, python_version, commit (empty when unknown).",
    ("version", "python_version", "commit"),
)
START_TIME = metrics.gauge(
    "joiner_controller_start_time_seconds",
    "Unix time the process started; process restarts are changes() of it (it is not a counter that survives them).",
)
LEADER = metrics.gauge(
    "joiner_leader",
    "1 while this replica leads and its controllers act (always 1 with --no-leader-elect), else 0; the sum over "
    "replicas is 1 when exactly one leads.",
)
LOOP_RESTARTS = metrics.counter(
    "joiner_controller_restarts_total",
    "Controller loops the operator restarted in-process after they crashed or returned, by controller.",
    ("controller",),
)


def version() -> str:
    try:
        return metadata.version("joiner")
    except metadata.PackageNotFoundError:
        return "unknown"


def commit() -> str:
    """The git commit: $JOINER_COMMIT (set when the image is built), else the checkout's HEAD, else ""."""
    env = os.environ.get("JOINER_COMMIT", "")
    if env:
        return env
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return ""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def record_start(*, now: float, commit_id: str | None = None) -> None:
    """Set the build info and start time once the process runs."""
    BUILD_INFO.labels(version(), platform.python_version(), commit() if commit_id is None else commit_id).set(1)
    START_TIME.set(now)

"""Fixtures for the Helm chart tests: helm and promtool built (or reused) by hack/build-tools.sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart" / "joiner"


@pytest.fixture(scope="session")
def tools() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-tools.sh")], check=True, cwd=ROOT, stdout=subprocess.PIPE, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])

"""The controller image as written (no Docker engine here: the Dockerfile is read, not built): a
base pinned by digest, dependencies pinned with hashes, non-root, nothing written at run time, and
an entrypoint that is the `joiner run` command."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from controller.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
LOCK = (ROOT / "deploy" / "image" / "requirements.lock").read_text()


def instructions(name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines() if line.startswith(f"{name} ")]


def final_stage() -> str:
    return DOCKERFILE.rsplit("\nFROM ", 1)[1]


def test_every_base_image_is_pinned_by_digest() -> None:
    bases = instructions("FROM")
    assert len(bases) == 2
    for base in bases:
        assert re.match(r"^python:3\.11[\w.-]*@sha256:[0-9a-f]{64}( AS \w+)?$", base), base


def test_the_image_runs_as_a_non_root_user_with_the_joiner_run_entrypoint() -> None:
    [user] = instructions("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    assert final_stage().index("USER") > final_stage().index("COPY --from=build")  # nothing runs as root after
    assert instructions("ENTRYPOINT") == ['["joiner", "run"]']
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["joiner"] == "controller.cli:main"
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--help"])
    assert exited.value.code == 0


def test_nothing_is_written_at_run_time() -> None:
    stage = final_stage()
    assert "PYTHONDONTWRITEBYTECODE=1" in stage
    assert "RUN " not in stage  # the final stage only copies the built environment
    # the bytecode is compiled in the build stage, by content hash (no timestamps, never re-checked)
    assert "compileall" in DOCKERFILE
    assert "--invalidation-mode unchecked-hash" in DOCKERFILE


def test_dependencies_are_installed_from_the_lock_with_hashes() -> None:
    assert "--require-hashes -r requirements.lock" in DOCKERFILE
    assert "--no-deps ." in DOCKERFILE  # joiner itself adds nothing unpinned
    pinned = {m.group(1).lower().replace("_", "-") for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", LOCK, re.M)}
    runtime = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in runtime:
        name = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, f"{name} is a runtime dependency missing from deploy/image/requirements.lock"
    blocks = re.split(r"^(?=[A-Za-z0-9_.-]+==)", LOCK, flags=re.M)[1:]
    assert blocks
    assert all("--hash=sha256:" in block for block in blocks)

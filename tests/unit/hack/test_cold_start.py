"""`make test` on a cold machine: the builds run in the background with one progress line per
binary and Go's output in a log file, and a failed build fails `make test` with the log's tail.

Go itself is replaced by tests/unit/data/fake-go (it "downloads" and "builds" instantly, and fails
to compile the binary named by FAKE_GO_FAIL); the build scripts, hack/build-all.sh and
hack/test.sh are the real ones, run in a copy of the repository's skeleton."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FAKE_GO = Path(__file__).parents[1] / "data" / "fake-go"


@pytest.fixture
def skeleton(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for script in ("build-all.sh", "build-binaries.sh", "build-tools.sh", "build-kueue.sh", "test.sh"):
        (root / "hack").mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "hack" / script, root / "hack" / script)
    shutil.copytree(REPO / "hack" / "tools", root / "hack" / "tools")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    shutil.copy(FAKE_GO, fake_bin / "go")
    (fake_bin / "go").chmod(0o755)
    return root


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    out = dict(os.environ)
    out.update(PATH=f"{tmp_path / 'bin'}{os.pathsep}{out['PATH']}", JOINER_CACHE_DIR=str(tmp_path / "cache"), **extra)
    return out


def run(args: list[str], cwd: Path, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=environment, capture_output=True, text=True, timeout=120, check=False)


def test_one_line_per_binary_with_what_is_left_and_go_in_a_log(skeleton: Path, tmp_path: Path) -> None:
    done = run(["bash", "hack/build-all.sh"], skeleton, env(tmp_path, JOINER_BUILD_STREAMS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    built = [line.split("] ", 1)[1] for line in lines if "] built " in line]
    assert [b.split(" in ")[0] for b in built] == [
        "built etcd",
        "built kwok",
        "built kube-apiserver",
        "built kube-scheduler",
        "built kube-controller-manager",
        "built kubectl",
        "built helm",
        "built promtool",
        "built prometheus",
        "built kueue",
    ]
    assert built[0].endswith(
        "9 left: kwok kube-apiserver kube-scheduler kube-controller-manager kubectl helm promtool prometheus kueue"
    )
    assert built[-1].endswith("0 left")
    assert "go: downloading" not in done.stdout + done.stderr
    log = (tmp_path / "cache" / "build.log").read_text()
    assert "go: downloading example.com/x v1.0.0" in log
    again = run(["bash", "hack/build-all.sh"], skeleton, env(tmp_path))
    assert "cached in" in again.stdout
    assert "] built " not in again.stdout


def test_two_streams_build_every_binary_once_and_count_down_what_is_left(skeleton: Path, tmp_path: Path) -> None:
    """The default: the cluster binaries in one stream, the tools then Kueue in the other."""
    done = run(["bash", "hack/build-all.sh"], skeleton, env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "10 binaries, 2 at a time" in lines[0]
    built = [line.split("] built ", 1)[1] for line in lines if "] built " in line]
    names = [b.split(" in ")[0] for b in built]
    cluster = ["etcd", "kwok", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"]
    others = ["helm", "promtool", "prometheus", "kueue"]
    assert [n for n in names if n in cluster] == cluster  # each stream keeps its own order
    assert [n for n in names if n in others] == others
    # marking a binary done and reading what is left is one step: each count once, 9 down to 0
    counts = sorted(int(b.split("; ")[1].split(" left")[0]) for b in built)
    assert counts == list(range(10))
    assert "all ready in" in lines[-1]
    assert "go: downloading" not in done.stdout + done.stderr
    log = (tmp_path / "cache" / "build.log").read_text()
    assert "go: downloading helm.sh/helm/v3/cmd/helm@" in log
    assert "go: downloading example.com/y v1.0.0" in log  # the cluster stream's, in the same log
    again = run(["bash", "hack/build-all.sh"], skeleton, env(tmp_path))
    assert again.stdout.count("cached in") == 3
    assert "] built " not in again.stdout
    assert "0 left" in again.stdout


@pytest.mark.parametrize("script", ["build-binaries.sh", "build-tools.sh", "build-kueue.sh"])
def test_a_second_build_of_the_same_pins_waits_for_the_first_and_reuses_it(
    skeleton: Path, tmp_path: Path, script: str
) -> None:
    """Two pytest workers (or `make demo` beside `make test`) asking at once build once: the second
    waits on the first's lock, then finds the binaries cached and prints the same directory."""
    calls = tmp_path / "go-calls"
    environment = env(tmp_path, FAKE_GO_SLEEP="0.5", FAKE_GO_CALLS=str(calls))
    args = ["bash", f"hack/{script}"]
    first = subprocess.Popen(
        args, cwd=skeleton, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    while not calls.exists():  # the first holds the lock once it runs go
        assert first.poll() is None, first.communicate()
    second = run(args, skeleton, environment)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 == second.returncode, err + second.stderr
    assert "is running; waiting for it" in second.stderr
    assert "cached in" in second.stderr
    assert second.stdout.splitlines()[-1] == out.splitlines()[-1]  # the same directory
    built = calls.read_text().splitlines()
    assert len(built) == len(set(built)), f"built twice: {built}"


def test_streams_is_one_or_two(skeleton: Path, tmp_path: Path) -> None:
    done = run(["bash", "hack/build-all.sh"], skeleton, env(tmp_path, JOINER_BUILD_STREAMS="4"))
    assert done.returncode == 2
    assert "JOINER_BUILD_STREAMS must be 1 or 2" in done.stderr


def test_a_failed_build_shows_the_logs_tail_and_fails(skeleton: Path, tmp_path: Path) -> None:
    done = run(["bash", "hack/build-all.sh"], skeleton, env(tmp_path, FAKE_GO_FAIL="kube-scheduler"))
    assert done.returncode == 1
    assert "hack/build-binaries.sh failed" in done.stdout
    assert "    ./x.go:1: undefined: y" in done.stdout  # the compiler's words, from the log


def fake_venv(root: Path, *, unit_rc: int, providers_rc: int = 0) -> None:
    """A .venv/bin whose pytest and python exit as told (the real ones would run this test again);
    ``providers_rc``: pytest's exit for the cloud providers' tests (everything but tests/unit)."""
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    pytest = (
        '#!/bin/sh\necho "pytest $*"\n'
        f'case "$*" in *--ignore=tests/unit*) exit {providers_rc} ;; esac\nexit {unit_rc}\n'
    )
    (bin_dir / "pytest").write_text(pytest)
    (bin_dir / "python").write_text('#!/bin/sh\necho "python $*"\nexit 0\n')
    for tool in ("pytest", "python"):
        (bin_dir / tool).chmod(0o755)
    (root / "Makefile").write_text("lint-fast:\n\t@echo lint-fast ran\n")


def test_make_test_fails_when_the_background_build_fails_though_the_unit_tests_pass(
    skeleton: Path, tmp_path: Path
) -> None:
    fake_venv(skeleton, unit_rc=0)
    done = run(["bash", "hack/test.sh"], skeleton, env(tmp_path, FAKE_GO_FAIL="kubectl"))
    assert done.returncode == 1, done.stdout
    out = done.stdout
    assert (
        out.index("pytest tests/unit -q")
        < out.index("lint-fast ran")
        < out.index("unit tests and lint passed")
        < out.index("pytest tests -q --ignore=tests/unit --ignore=tests/e2e --ignore=tests/helm")
    )
    assert "./x.go:1: undefined: y" in out
    assert "FAILED after" in out
    assert "the build of the cluster binaries or tools failed" in out
    assert "pytest tests/helm tests/e2e" not in out


def test_make_test_runs_e2e_after_the_build_and_gives_the_unit_verdict_first(skeleton: Path, tmp_path: Path) -> None:
    fake_venv(skeleton, unit_rc=0)
    done = run(["bash", "hack/test.sh"], skeleton, env(tmp_path))
    assert done.returncode == 0, done.stdout
    out = done.stdout
    assert (
        out.index("unit tests and lint passed")
        < out.index("built kubectl")
        < out.index("pytest tests/helm tests/e2e -q")
    )
    failing = tmp_path / "second"
    shutil.copytree(skeleton, failing, ignore=shutil.ignore_patterns(".venv", ".build"))
    fake_venv(failing, unit_rc=1)
    done = run(["bash", "hack/test.sh"], failing, env(tmp_path))
    assert done.returncode == 1
    assert "unit tests failed" in done.stdout
    assert "pytest tests/helm tests/e2e" not in done.stdout


def test_the_cloud_providers_tests_come_after_the_unit_verdict_and_a_failure_stops_make_test(
    skeleton: Path, tmp_path: Path
) -> None:
    fake_venv(skeleton, unit_rc=0, providers_rc=1)
    done = run(["bash", "hack/test.sh"], skeleton, env(tmp_path))
    assert done.returncode == 1, done.stdout
    out = done.stdout
    assert out.index("unit tests and lint passed") < out.index("the cloud providers' tests against their fake servers")
    assert "FAILED after" in out
    assert "the cloud providers' tests" in out.split("FAILED after", 1)[1]
    assert "pytest tests/helm tests/e2e" not in out

#!/usr/bin/env bash
# `make test`: the unit tests and the lint that need no cluster first, while the cluster binaries
# and the tools build (or are found cached) in the background; then, once they are there, the
# checks that need helm and the end-to-end tests against the local KWOK cluster.
#
# Order: tests/unit and lint-fast (the verdict a contributor waits for), then the cloud providers'
# tests against their fake servers, then the build's end, then the chart's and end-to-end tests.
# The background build prints one line per binary (what it built, in how long, what is left) to
# .build/progress.log, shown here once the unit tests are done; Go's own output goes to
# .build/go.log. A failed build fails `make test` with the log's last lines, even when every unit
# test passed. When the unit tests or the lint fail, the verdict comes at once and the build keeps
# going in the background, so the next run finds the binaries cached.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=.venv/bin
out=.build
mkdir -p "$out"
progress="$out/progress.log"
: >"$progress"
started=$(date +%s)
elapsed() { echo "$(( $(date +%s) - started ))s"; }

# niced: on a cold machine the build would otherwise take a core from the unit tests, whose verdict
# is what a contributor waits for; it still gets every cycle they leave
JOINER_BUILD_LOG="$out/go.log" nohup nice -n 10 bash hack/build-all.sh >"$progress" 2>&1 </dev/null &
builder=$!
echo "==> building the cluster binaries and tools in the background (pid $builder; progress in $progress, Go's output in $out/go.log)"

still_building() {
    if kill -0 "$builder" 2>/dev/null; then
        echo "    (the binaries keep building in the background, pid $builder, for the next run: $progress)"
    fi
}

echo "==> unit tests"
"$BIN/pytest" tests/unit -q
unit=$?
echo "==> lint (ruff, mypy --strict, layering, generated files, hadolint)"
make --no-print-directory lint-fast
lint=$?
if [ "$unit" -ne 0 ] || [ "$lint" -ne 0 ]; then
    echo "==> FAILED after $(elapsed): unit tests $([ "$unit" -eq 0 ] && echo passed || echo failed)," \
        "lint $([ "$lint" -eq 0 ] && echo passed || echo failed)"
    still_building
    exit 1
fi
echo "==> unit tests and lint passed after $(elapsed)"

# the cloud providers' tests start fake cloud servers and wait on them (half of this phase's time
# on a cold machine): after the unit verdict, still while the binaries build
echo "==> the cloud providers' tests against their fake servers (tests/aws, tests/gcp, tests/azure)"
if ! "$BIN/pytest" tests -q --ignore=tests/unit --ignore=tests/e2e --ignore=tests/helm; then
    echo "==> FAILED after $(elapsed): the cloud providers' tests"
    still_building
    exit 1
fi

if kill -0 "$builder" 2>/dev/null; then
    echo "==> waiting for the background build:"
fi
tail -n +1 -f --pid="$builder" "$progress" | sed 's/^/    /'
if ! wait "$builder"; then
    echo "==> FAILED after $(elapsed): the build of the cluster binaries or tools failed (above; all of Go's output: $out/go.log)"
    exit 1
fi

echo "==> deploy/controller/ generated from the Helm chart"
"$BIN/python" hack/gen-manifests.py --check || exit 1
# The end-to-end tests mostly wait (on the controller's timeouts, kwok's stages, kube-scheduler): one
# after another they keep less than a third of one core busy. So they run on several clusters at
# once, one per pytest-xdist worker (.kwok-gw0, .kwok-gw1, ...; each stopped when its worker ends),
# a test file at a time per worker, the longest files first (tests/e2e/conftest.py).
workers="${JOINER_E2E_WORKERS:-3}"
# each worker stops its cluster when its session ends; an interrupted run (Ctrl-C) may not get there
stop_worker_clusters() {
    local d
    for d in .kwok-gw*; do
        [ -d "$d/pids" ] && JOINER_CLUSTER_DIR="$d" bash hack/cluster.sh down >/dev/null 2>&1
    done
    return 0
}
trap stop_worker_clusters EXIT
echo "==> the Helm chart (helm, promtool) and end-to-end tests, on $workers KWOK clusters at once (each worker starts its own)"
"$BIN/pytest" tests/helm tests/e2e -q -n "$workers" --dist loadfile --no-loadscope-reorder \
    || { echo "==> FAILED after $(elapsed): chart or end-to-end tests"; exit 1; }
echo "==> all passed in $(elapsed)"

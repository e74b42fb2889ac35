#!/usr/bin/env bash
# How long a contributor on a new machine waits for the unit tests' verdict: a fresh clone of this
# repository's HEAD, every cache empty and private to the run (joiner's binaries, Go's build and
# module caches, pip's cache), `make test` until it prints the unit tests' and lint's verdict, then
# stopped (the background build with it). With --whole, `make test` runs to its end and both times
# are printed, with the build's line per binary (the cluster it leaves is stopped, as CI stops it).
# docs/development.md records the figures.
#
#     bash hack/bench/cold-verdict.sh [--whole] [WORKDIR]     # WORKDIR: default a new directory under /tmp
#
# Run it alone on the machine: the verdict shares the cores with the niced Go build it starts.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
whole=""
if [ "${1:-}" = "--whole" ]; then whole=1; shift; fi
work="${1:-$(mktemp -d /tmp/joiner-cold.XXXXXX)}"
mkdir -p "$work"/{cache,gocache,gomod,pip}
rm -rf "$work/joiner"
git clone -q "$repo" "$work/joiner"
# make test reads ../shared beside the checkout, as CI has it
[ -e "$work/shared" ] || [ ! -d "$repo/../shared" ] || ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
cd "$work/joiner" || exit 1
log="$work/make-test.log"
started=$(date +%s)
env JOINER_CACHE_DIR="$work/cache" GOCACHE="$work/gocache" GOMODCACHE="$work/gomod" PIP_CACHE_DIR="$work/pip" \
    setsid make test >"$log" 2>&1 &
pid=$!
verdict=""
while sleep 1; do
    verdict=$(grep -m1 "unit tests and lint passed after\|FAILED after" "$log")
    [ -n "$verdict" ] && break
    kill -0 "$pid" 2>/dev/null || break
done
took=$(( $(date +%s) - started ))
if [ -n "$whole" ]; then
    wait "$pid"
    rc=$?
    total=$(( $(date +%s) - started ))
    JOINER_CLUSTER_DIR="$work/joiner/.kwok" bash hack/cluster.sh down >/dev/null 2>&1
    echo "verdict after ${took}s, whole make test after ${total}s (exit $rc) from make test's start"
    grep "==> \|passed in\|failed in\|\] built \|all ready in" "$log"
    exit "$rc"
fi
# make test and everything it started (the build in the background) are one session
pkill -s "$pid" 2>/dev/null
sleep 2
pkill -9 -s "$pid" 2>/dev/null
echo "verdict after ${took}s from make test's start: ${verdict:-none (see $log)}"
grep "==> \|passed in\|failed in" "$log"
[ -n "$verdict" ] && [[ "$verdict" != *FAILED* ]]

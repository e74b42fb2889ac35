#!/usr/bin/env bash
# Builds the local KWOK cluster's binaries (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl, kwok) from the Go modules pinned under
# hack/tools/, and caches them outside the repository.
#
# The cache key is a hash of the pins (go.mod + go.sum of each tools module, and
# this script), so a second run builds nothing and a change of pins rebuilds.
# Prints the directory holding the binaries on its last line of stdout.
#
#   JOINER_CACHE_DIR   cache root (default: $XDG_CACHE_HOME/joiner or ~/.cache/joiner)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/hack/tools"
cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"

BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

log() { echo "[build-binaries $(date +%H:%M:%S)] $*" >&2; }

key=$(cat "$tools"/k8s/go.mod "$tools"/k8s/go.sum "$tools"/etcd/go.mod "$tools"/etcd/go.sum \
          "$tools"/kwok/go.mod "$tools"/kwok/go.sum "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
k8s_version=$(grep -oE '^[[:space:]]*(require[[:space:]]+)?k8s\.io/kubernetes v[0-9]+\.[0-9]+\.[0-9]+' "$tools/k8s/go.mod" \
    | grep -oE 'v[0-9]+\.[0-9]+\.[0-9]+' | head -n 1)
[ -n "$k8s_version" ] || { log "cannot read the k8s.io/kubernetes version from $tools/k8s/go.mod"; exit 1; }
out="$cache/bin/$k8s_version-$key"

complete() {
    local b
    for b in "${BINARIES[@]}"; do [ -x "$out/$b" ] || return 1; done
}

reuse() { # the binaries of these pins are cached: print where, and stop here
    if complete; then
        log "binaries for $k8s_version are cached in $out"
        echo "$out"
        exit 0
    fi
}
reuse

mkdir -p "$cache/bin"
# One build of these pins at a time: a second caller (another pytest worker, `make demo` beside
# `make test`) waits for the first and reuses what it built, instead of building it again and
# replacing the directory under a test that runs the binaries.
exec 9>"$cache/bin/.lock"
if ! flock -n 9; then
    log "another build of the cluster binaries is running; waiting for it ..."
    flock 9
fi
reuse

command -v go >/dev/null || { log "go is not installed: the cluster binaries are built with the Go toolchain"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

tmp=$(mktemp -d "$cache/bin/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# Version stamps, so that `kubectl version` and /version tell the truth.
major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

build() { # build <module dir> <binary name> <package> [ldflags]
    local dir=$1 name=$2 pkg=$3 ldflags=${4:--s -w} t0
    t0=$(date +%s)
    log "building $name ($pkg) ..."
    (cd "$tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$tmp/$name" "$pkg")
    log "built $name in $(( $(date +%s) - t0 ))s"
}

log "downloading modules (first run only: about 250 MB) ..."
for dir in k8s etcd kwok; do (cd "$tools/$dir" && go mod download); done
log "modules ready after $(( $(date +%s) - start ))s"

build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "all binaries built in $(( $(date +%s) - start ))s into $out"
echo "$out"

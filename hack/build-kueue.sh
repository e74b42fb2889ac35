#!/usr/bin/env bash
# Builds Kueue's manager from its pinned Go module (sigs.k8s.io/kueue), for the end-to-end tests of
# ProvisioningRequests (tests/e2e/test_kueue.py), into a cache outside the repository, rebuilt only
# when the pin (or this script) changes. Also copies the CRDs the tests install out of the module
# cache: Kueue's own and the ProvisioningRequest CRD of the cluster-autoscaler API module Kueue pins.
# Prints the directory holding `kueue` and `crds/` on its last line of stdout.
#
#   JOINER_CACHE_DIR   cache root (default: $XDG_CACHE_HOME/joiner or ~/.cache/joiner)
#
# A cold build downloads the modules first: about 7 minutes on a 2-core machine.
set -euo pipefail

KUEUE=v0.17.0   # sigs.k8s.io/kueue

cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"
key=$({ printf '%s\n' "$KUEUE"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
out="$cache/kueue/kueue-$KUEUE-$key"
log() { echo "[build-kueue $(date +%H:%M:%S)] $*" >&2; }
cached() { [ -x "$out/kueue" ] && [ -d "$out/crds" ]; }

reuse() { # the binaries of these pins are cached: print where, and stop here
    if cached; then
        log "kueue $KUEUE is cached in $out"
        echo "$out"
        exit 0
    fi
}
reuse

mkdir -p "$cache/kueue"
# One build of these pins at a time: a second caller (another pytest worker, `make demo` beside
# `make test`) waits for the first and reuses what it built, instead of building it again and
# replacing the directory under a test that runs the binaries.
exec 9>"$cache/kueue/.lock"
if ! flock -n 9; then
    log "another build of kueue is running; waiting for it ..."
    flock 9
fi
reuse
command -v go >/dev/null || { log "go is required: kueue is built from its Go module"; exit 1; }
tmp=$(mktemp -d "$cache/kueue/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GOFLAGS=-mod=mod GOBIN="$tmp" CGO_ENABLED=0 GOTOOLCHAIN=local
start=$(date +%s)
log "building kueue $KUEUE (cold: module downloads first) ..."
go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE"
log "built kueue in $(( $(date +%s) - start )) s"

moddir() { (cd "$tmp" && go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'); }
kueue_dir=$(moddir "sigs.k8s.io/kueue@$KUEUE")
ca_version=$(awk '$1=="k8s.io/autoscaler/cluster-autoscaler/apis"{print $2}' "$kueue_dir/go.mod")
ca_dir=$(moddir "k8s.io/autoscaler/cluster-autoscaler/apis@$ca_version")
mkdir -p "$tmp/crds/kueue"
cp "$kueue_dir"/config/components/crd/bases/*.yaml "$tmp/crds/kueue/"
cp "$ca_dir/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml" "$tmp/crds/"
chmod -R u+w "$tmp/crds"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "done in $(( $(date +%s) - start )) s: $out"
echo "$out"

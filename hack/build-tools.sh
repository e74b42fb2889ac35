#!/usr/bin/env bash
# Builds helm, promtool and prometheus from their pinned Go modules (the way hack/build-binaries.sh
# builds the cluster binaries) into a cache outside the repository, rebuilt only when the pins
# below (or this script) change. Prints the directory holding them on its last line of stdout.
#
#   JOINER_CACHE_DIR   cache root (default: $XDG_CACHE_HOME/joiner or ~/.cache/joiner)
#
# A cold build downloads the modules first: about 6 minutes on a 2-core machine.
#
# promtool and prometheus are built with Prometheus's own `remove_all_sd` tag: without the service
# discoveries of every cloud (their SDKs are most of the code), keeping the static, file and HTTP
# ones that the e2e suite and the dashboard run use (static_configs). That took promtool from 435 s
# to 131 s and prometheus from 126 s to 87 s here, with the modules already downloaded. No tool
# carries debug information (-s -w), as the cluster binaries do not.
set -euo pipefail

HELM=v3.22.0          # helm.sh/helm/v3
PROMETHEUS=v0.316.0   # github.com/prometheus/prometheus (prometheus and promtool)

cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"
key=$({ printf '%s %s\n' "$HELM" "$PROMETHEUS"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
out="$cache/tools/helm-$HELM-prometheus-$PROMETHEUS-$key"
log() { echo "[build-tools $(date +%H:%M:%S)] $*" >&2; }
cached() { [ -x "$out/helm" ] && [ -x "$out/promtool" ] && [ -x "$out/prometheus" ]; }

reuse() { # the binaries of these pins are cached: print where, and stop here
    if cached; then
        log "helm $HELM, promtool and prometheus $PROMETHEUS are cached in $out"
        echo "$out"
        exit 0
    fi
}
reuse

mkdir -p "$cache/tools"
# One build of these pins at a time: a second caller (another pytest worker, `make demo` beside
# `make test`) waits for the first and reuses what it built, instead of building it again and
# replacing the directory under a test that runs the binaries.
exec 9>"$cache/tools/.lock"
if ! flock -n 9; then
    log "another build of helm, promtool and prometheus is running; waiting for it ..."
    flock 9
fi
reuse
command -v go >/dev/null || { log "go is required: helm, promtool and prometheus are built from their Go modules"; exit 1; }
tmp=$(mktemp -d "$cache/tools/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GOFLAGS=-mod=mod GOBIN="$tmp" CGO_ENABLED=0 GOTOOLCHAIN=local
start=$(date +%s)
for spec in "helm.sh/helm/v3/cmd/helm@$HELM" \
            "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS" \
            "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS"; do
    t0=$(date +%s)
    tags=()
    [[ "$spec" == github.com/prometheus/* ]] && tags=(-tags remove_all_sd)
    log "building ${spec##*/} (cold: module downloads first) ..."
    go install "${tags[@]}" -trimpath -ldflags "-s -w" "$spec"
    log "built ${spec##*/} in $(( $(date +%s) - t0 )) s"
done
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "done in $(( $(date +%s) - start )) s: $out"
echo "$out"

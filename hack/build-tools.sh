#!/usr/bin/env bash
# Builds helm, promtool and prometheus from their pinned Go modules (the way hack/build-binaries.sh
# builds the cluster binaries) into a cache outside the repository, rebuilt only when the pins
# below (or this script) change. Prints the directory holding them on its last line of stdout.
#
#   JOINER_CACHE_DIR   cache root (default: $XDG_CACHE_HOME/joiner or ~/.cache/joiner)
#
# A cold build downloads the modules first: about 6 minutes on a 2-core machine.
set -euo pipefail

HELM=v3.22.0          # helm.sh/helm/v3
PROMETHEUS=v0.316.0   # github.com/prometheus/prometheus (prometheus and promtool)

cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"
key=$({ printf '%s %s\n' "$HELM" "$PROMETHEUS"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
out="$cache/tools/helm-$HELM-prometheus-$PROMETHEUS-$key"
log() { echo "[build-tools $(date +%H:%M:%S)] $*" >&2; }

if [ -x "$out/helm" ] && [ -x "$out/promtool" ] && [ -x "$out/prometheus" ]; then
    log "helm $HELM, promtool and prometheus $PROMETHEUS are cached in $out"
    echo "$out"
    exit 0
fi
command -v go >/dev/null || { log "go is required: helm, promtool and prometheus are built from their Go modules"; exit 1; }
mkdir -p "$cache/tools"
tmp=$(mktemp -d "$cache/tools/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GOFLAGS=-mod=mod GOBIN="$tmp" CGO_ENABLED=0 GOTOOLCHAIN=local
start=$(date +%s)
for spec in "helm.sh/helm/v3/cmd/helm@$HELM" \
            "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS" \
            "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS"; do
    t0=$(date +%s)
    log "building ${spec##*/} (cold: module downloads first) ..."
    go install "$spec"
    log "built ${spec##*/} in $(( $(date +%s) - t0 )) s"
done
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "done in $(( $(date +%s) - start )) s: $out"
echo "$out"

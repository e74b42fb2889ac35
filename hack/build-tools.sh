#!/usr/bin/env bash
# Builds helm, promtool and prometheus from their pinned Go modules into a cache outside the
# repository (rebuilt only when the pins change). Prints the directory on its last line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"
HELM=v3.22.0
PROMETHEUS=v0.316.0
key=$({ printf "%s %s\n" "$HELM" "$PROMETHEUS"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
out="$cache/tools/$key"
log() { echo "[build-tools $(date +%H:%M:%S)] $*" >&2; }
if [ -x "$out/helm" ] && [ -x "$out/promtool" ] && [ -x "$out/prometheus" ]; then
    echo "$out"; exit 0
fi
command -v go >/dev/null || { log "go is required to build helm/promtool/prometheus"; exit 1; }
mkdir -p "$out"
export GOFLAGS=-mod=mod GOBIN="$out" CGO_ENABLED=0
log "building helm $HELM"; go install "helm.sh/helm/v3/cmd/helm@$HELM"
log "building promtool $PROMETHEUS"; go install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS"
log "building prometheus $PROMETHEUS"; go install "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS"
echo "$out"

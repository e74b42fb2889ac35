#!/usr/bin/env bash
# Plan fidelity of `make demo`: how many L4 NodeClaims it buys (one plan buys 8) and how many nodes
# stay empty, with nominations on and off, alternating, on a fresh cluster each time.
#   bash hack/bench/demo_fidelity.sh [RUNS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
runs=${1:-3}
for i in $(seq 1 "$runs"); do
    for flags in "" "--no-nominate"; do
        bash hack/cluster.sh down >/dev/null 2>&1 || true
        JOINER_FLAGS="$flags" bash hack/demo.sh >/tmp/joiner-demo-fidelity.log 2>&1 \
            || { echo "make demo failed: /tmp/joiner-demo-fidelity.log"; exit 1; }
        export KUBECONFIG=.kwok/kubeconfig
        kubectl() { "$(cat .kwok/bindir)/kubectl" "$@"; }
        l4=$(kubectl get nodeclaims --no-headers | grep -c '^l4-inference' || true)
        used=$(kubectl get pods -n demo -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u)
        empty=0
        for n in $(kubectl get nodes -o name | sed 's#node/##'); do
            grep -qx "$n" <<<"$used" || empty=$((empty + 1))
        done
        echo "run $i, nominations ${flags:-on}: L4 NodeClaims $l4 (one plan: 8), empty nodes $empty"
    done
done

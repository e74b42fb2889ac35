#!/usr/bin/env bash
# The main job, end to end on the local KWOK cluster:
#   1. build (or reuse) the pinned binaries and start the cluster
#   2. install the CRDs, a KWOKNodeClass and the example GPU NodePools
#   3. run the joiner controller with the kwok provider
#   4. submit sample GPU workloads (inference, CPU services, a distributed-training gang)
#   5. show the NodeClaims and Nodes joiner made, and the pods Running on them
#   6. interrupt one machine of the gang (scheduled maintenance) and show the gang restart as a unit
# The cluster stays up afterwards for exploring (KUBECONFIG=.kwok/kubeconfig); `make cluster-down` ends it.
# Like hack/cluster.sh, it keeps the cluster in $JOINER_CLUSTER_DIR when that is set (default: .kwok/).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
dir="${JOINER_CLUSTER_DIR:-$root/.kwok}"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "starting the local KWOK cluster"
bash hack/cluster.sh up
bins=$(cat "$dir/bindir")
export KUBECONFIG="$dir/kubeconfig"
export PATH="$bins:$PATH"

say "installing the CRDs and the example NodePools"
kubectl apply --server-side --force-conflicts -f deploy/crds/ >/dev/null
kubectl wait --for=condition=Established crd/nodepools.joiner.sh crd/nodeclaims.joiner.sh \
    crd/kwoknodeclasses.joiner.sh --timeout=60s >/dev/null
kubectl apply -f deploy/examples/
kubectl get nodepools

say "running the joiner controller (logs: $dir/logs/joiner.log)"
if [ -f "$dir/pids/joiner" ] && kill -0 "$(cat "$dir/pids/joiner")" 2>/dev/null; then
    kill "$(cat "$dir/pids/joiner")" && sleep 1
fi
.venv/bin/joiner run --provider kwok --kubeconfig "$KUBECONFIG" --no-leader-elect \
    --metrics-port 18080 --health-port 18081 --bind-address 127.0.0.1 --log-format json ${JOINER_FLAGS:-} \
    > "$dir/logs/joiner.log" 2>&1 &
echo $! > "$dir/pids/joiner"
trap 'kill "$(cat "$dir/pids/joiner")" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    curl -sf http://127.0.0.1:18081/readyz >/dev/null 2>&1 && break
    sleep 0.2
done
curl -sf http://127.0.0.1:18081/readyz >/dev/null || { tail -n 30 "$dir/logs/joiner.log"; exit 1; }

say "submitting sample GPU workloads"
kubectl delete namespace demo --ignore-not-found --wait=true >/dev/null
kubectl create namespace demo >/dev/null
kubectl apply -f hack/demo/workloads.yaml

say "waiting for every pod to run"
start=$(date +%s)
while true; do
    total=$(kubectl get pods -n demo --no-headers 2>/dev/null | wc -l)
    running=$(kubectl get pods -n demo --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
    printf '  %3ds: %d/%d pods Running\n' $(( $(date +%s) - start )) "$running" "$total"
    [ "$total" -gt 0 ] && [ "$running" -eq "$total" ] && break
    if [ $(( $(date +%s) - start )) -gt 180 ]; then
        echo "pods did not all start within 180s; see $dir/logs/joiner.log"
        kubectl get pods -n demo -o wide
        exit 1
    fi
    sleep 2
done

say "kubectl get nodeclaims -o wide"
kubectl get nodeclaims -o wide
say "kubectl get nodes -L joiner.sh/nodepool,node.kubernetes.io/instance-type,joiner.sh/capacity-type"
kubectl get nodes -L joiner.sh/nodepool,node.kubernetes.io/instance-type,joiner.sh/capacity-type,topology.kubernetes.io/zone
say "kubectl get nodepools -o wide"
kubectl get nodepools -o wide
say "kubectl get pods -n demo -o wide"
kubectl get pods -n demo -o wide
say "an interruption of a gang member: AWS schedules maintenance for one trainer machine"
victim=$(kubectl get nodeclaims -l joiner.sh/gang=demo.trainer -o jsonpath='{.items[0].metadata.name}')
old_pods=$(kubectl get pods -n demo -l joiner.sh/gang=trainer -o jsonpath='{.items[*].metadata.uid}')
echo "kubectl annotate nodeclaim $victim joiner.sh/interruption=scheduled-change"
echo "  (on AWS the same handler reads the SQS queue's EventBridge messages: docs/aws.md#interruption)"
kubectl annotate nodeclaim "$victim" joiner.sh/interruption=scheduled-change >/dev/null
start=$(date +%s)
while true; do
    fresh=0
    for uid in $(kubectl get pods -n demo -l joiner.sh/gang=trainer --field-selector=status.phase=Running \
            -o jsonpath='{.items[*].metadata.uid}'); do
        case " $old_pods " in *" $uid "*) ;; *) fresh=$((fresh + 1)) ;; esac
    done
    printf '  %3ds: %d/4 trainer pods Running again on fresh nodes\n' $(( $(date +%s) - start )) "$fresh"
    [ "$fresh" -eq 4 ] && break
    if [ $(( $(date +%s) - start )) -gt 180 ]; then
        echo "the gang did not restart within 180s; see $dir/logs/joiner.log"
        break
    fi
    sleep 2
done
kubectl get events -n demo --field-selector reason=GangMemberLost,involvedObject.name=trainer-0 \
    -o custom-columns=OBJECT:.involvedObject.name,MESSAGE:.message
kubectl get nodeclaims -l joiner.sh/gang=demo.trainer -o wide

say "a few of joiner's metrics"
curl -s http://127.0.0.1:18080/metrics | grep -E '^joiner_(nodeclaims_(created|launched|initialized)_total|gangs_admitted|pods_pending|provisioner_nominations_total|interruption_(messages_total|replacement_seconds_(sum|count)))' | head -30 || true

cat <<EOF

The cluster is still up: export KUBECONFIG=$KUBECONFIG PATH=$bins:\$PATH
Stop it with: ${JOINER_CLUSTER_DIR:+JOINER_CLUSTER_DIR=$dir }make cluster-down
EOF

#!/usr/bin/env bash
# The local KWOK cluster: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and the kwok controller, all on 127.0.0.1, no kubelet,
# no containers. Nodes annotated kwok.x-k8s.io/node=fake become Ready and
# the pods bound to them Running.
#
#   hack/cluster.sh up       build or reuse the binaries, start the cluster, wait until ready
#   hack/cluster.sh down     stop every process and forget the cluster's data
#   hack/cluster.sh status   say whether it runs (exit 0) or not (exit 1)
#   hack/cluster.sh env      print `export` lines (KUBECONFIG, PATH with kubectl)
#
# State lives in $JOINER_CLUSTER_DIR (default: .kwok/ in the repository):
# kubeconfig, pki/, logs/, pids/. etcd keeps its data on tmpfs when it can.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="${JOINER_CLUSTER_DIR:-$root/.kwok}"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
PROCS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
# kwok renews each fake node's Lease every quarter of its duration, as the kubelet does: with the
# kubelet's 40 s that is 10 s, 120 writes a second for 1,200 nodes (70,000 of a 10,000-pod burst's
# 162,000 apiserver requests). A lab of a thousand fake nodes renews every 60 s instead, and
# kube-controller-manager waits five renewals (300 s) before it calls a silent node NotReady; the
# kubelet's defaults keep the same ratio (10 s renewals, 50 s grace). A node whose kwok stops is
# marked NotReady later; no test relies on that, and Ready is set by kwok's stages as before.
NODE_LEASE_SECONDS=240
NODE_MONITOR_GRACE=300

log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }

pid_alive() { [ -f "$dir/pids/$1" ] && kill -0 "$(cat "$dir/pids/$1")" 2>/dev/null; }

bin_dir() { bash "$root/hack/build-binaries.sh" | tail -n 1; }

kctl() { "$(cat "$dir/bindir")/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

apiserver_ready() { [ -f "$dir/bindir" ] && kctl get --raw /readyz >/dev/null 2>&1; }

running() {
    local p
    for p in "${PROCS[@]}"; do pid_alive "$p" || return 1; done
    apiserver_ready
}

# a free port, not one of the arguments (hack/ports.py says why below the ephemeral range)
free_port() {
    python3 "$root/hack/ports.py" "$@"
}

stop_all() {
    local p pid i
    for p in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
        [ -f "$dir/pids/$p" ] || continue
        pid=$(cat "$dir/pids/$p")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$dir/pids/$p"
    done
    if [ -f "$dir/etcd-data" ]; then rm -rf "$(cat "$dir/etcd-data")"; rm -f "$dir/etcd-data"; fi
}

make_pki() {
    local pki="$dir/pki"
    [ -f "$pki/admin.crt" ] && return 0
    command -v openssl >/dev/null || { log "openssl is required to make the cluster's certificates"; exit 1; }
    log "creating certificates in $pki"
    mkdir -p "$pki"
    (
        cd "$pki"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
            -subj "/CN=joiner-kwok-ca" 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
            -subj "/CN=kube-apiserver" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1\n' > san.ext
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out apiserver.crt -days 3650 -extfile san.ext 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
            -subj "/O=system:masters/CN=kubernetes-admin" 2>/dev/null
        openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out admin.crt -days 3650 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        rm -f ./*.csr san.ext
    )
}

write_kubeconfig() { # write_kubeconfig <port>
    local pki="$dir/pki"
    cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: joiner-kwok
  cluster:
    server: https://127.0.0.1:$1
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: joiner-kwok
  context: {cluster: joiner-kwok, user: admin}
current-context: joiner-kwok
EOF
}

start() { # start <name> <binary> args...
    local name=$1 bin=$2
    shift 2
    setsid "$bin" "$@" >"$dir/logs/$name.log" 2>&1 < /dev/null &
    echo $! > "$dir/pids/$name"
}

wait_for() { # wait_for <what> <seconds> <command...>
    local what=$1 secs=$2 i
    shift 2
    for i in $(seq 1 $((secs * 10))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    log "$what did not become ready within ${secs}s; logs are in $dir/logs/"
    return 1
}

kwok_stages() { # the Stage YAMLs shipped inside the pinned kwok module, read from the module cache
    local mod
    mod=$(cd "$root/hack/tools/kwok" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    local out="$dir/kwok-stages.yaml" f
    # Every real node has its own kubelet reporting pod status; kwok plays them all, 4 objects at a
    # time by default, which made pods wait seconds between binding and Running at 1,000 pods.
    # A real kubelet also creates its own node Lease, and kwok plays a Node (Ready, its pods) only
    # once it holds that Lease: 4 Leases at a time (kwok's default) made 156 new Nodes wait up to
    # 8 s for Ready behind each other on a loaded apiserver. The pods of a newly held Node are
    # listed 8 Nodes at a time for the same reason.
    cat > "$out" <<'YAML'
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:  # a KwokConfiguration is not defaulted: every field kwok needs is spelled out
  cidr: 10.0.0.0/24
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 16
  nodeLeaseParallelism: 64
  podsOnNodeSyncParallelism: 8
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
---
YAML
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        if [ ! -f "$mod/kustomize/stage/$f" ]; then
            log "kwok stage $f is missing from $mod/kustomize/stage"
            exit 1
        fi
        { cat "$mod/kustomize/stage/$f"; echo "---"; } >> "$out"
    done
    echo "$out"
}

up() {
    if running; then
        log "already running: KUBECONFIG=$dir/kubeconfig"
        return 0
    fi
    stop_all
    local bins
    bins=$(bin_dir)
    echo "$bins" > "$dir/bindir"
    make_pki
    mkdir -p "$dir/logs" "$dir/pids"
    local pki="$dir/pki" api_port etcd_port peer_port sched_port stages data t0
    t0=$(date +%s)
    api_port=$(free_port); etcd_port=$(free_port "$api_port"); peer_port=$(free_port "$api_port" "$etcd_port")
    write_kubeconfig "$api_port"
    stages=$(kwok_stages)

    if [ -d /dev/shm ] && [ -w /dev/shm ]; then
        data=$(mktemp -d /dev/shm/joiner-etcd-XXXXXX)
    else
        data=$(mktemp -d "$dir/etcd-XXXXXX")
    fi
    echo "$data" > "$dir/etcd-data"

    log "starting etcd on 127.0.0.1:$etcd_port"
    start etcd "$bins/etcd" --name=joiner --data-dir="$data" --unsafe-no-fsync \
        --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
        --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
        --initial-cluster="joiner=http://127.0.0.1:$peer_port" --log-level=warn \
        --quota-backend-bytes=4294967296 --auto-compaction-retention=5m
    wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

    # JOINER_APISERVER_AUDIT=1: every request's metadata (who, verb, resource) to logs/audit.log,
    # for counting requests by client (hack/bench/race.py --audit); off by default, it costs CPU
    audit=()
    if [ "${JOINER_APISERVER_AUDIT:-}" = 1 ]; then
        printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: [RequestReceived]' \
            'rules:' '- level: Metadata' > "$dir/audit-policy.yaml"
        : > "$dir/logs/audit.log"
        audit=(--audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/logs/audit.log"
            --audit-log-format=json --audit-log-mode=batch --audit-log-maxsize=0)
    fi

    log "starting kube-apiserver on 127.0.0.1:$api_port${audit:+ (audit log on)}"
    start kube-apiserver "$bins/kube-apiserver" "${audit[@]}" \
        --etcd-servers="http://127.0.0.1:$etcd_port" \
        --bind-address=127.0.0.1 --secure-port="$api_port" \
        --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
        --client-ca-file="$pki/ca.crt" \
        --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range=10.96.0.0/16 \
        --authorization-mode=Node,RBAC \
        --disable-admission-plugins=ServiceAccount \
        --allow-privileged=true \
        --max-requests-inflight=1000 --max-mutating-requests-inflight=500 \
        --enable-priority-and-fairness=false \
        --event-ttl=1h
    wait_for kube-apiserver 60 kctl get --raw /readyz

    log "starting kube-controller-manager, kube-scheduler and kwok"
    start kube-controller-manager "$bins/kube-controller-manager" \
        --kubeconfig="$dir/kubeconfig" --leader-elect=false \
        --bind-address=127.0.0.1 --secure-port=0 \
        --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
        --controllers='*,-nodeipam,-cloud-node-lifecycle,-service,-route,-persistentvolume-binder,-attachdetach,-ttl' \
        --kube-api-qps=500 --kube-api-burst=1000 --concurrent-gc-syncs=20 \
        --node-monitor-grace-period="${NODE_MONITOR_GRACE}s"
    # its /metrics (queue lengths, attempts) are served to anyone on loopback, for the benchmarks
    sched_port=$(free_port "$api_port" "$etcd_port" "$peer_port")
    echo "$sched_port" > "$dir/scheduler-port"
    start kube-scheduler "$bins/kube-scheduler" \
        --kubeconfig="$dir/kubeconfig" --leader-elect=false \
        --bind-address=127.0.0.1 --secure-port="$sched_port" \
        --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
        --kube-api-qps=500 --kube-api-burst=1000
    start kwok "$bins/kwok" \
        --kubeconfig="$dir/kubeconfig" \
        --manage-all-nodes=false \
        --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
        --node-ip=10.0.0.1 --node-lease-duration-seconds="$NODE_LEASE_SECONDS" \
        --config="$stages"
    local p
    sleep 0.5
    for p in "${PROCS[@]}"; do
        pid_alive "$p" || { log "$p exited at start: see $dir/logs/$p.log"; tail -n 20 "$dir/logs/$p.log" >&2; exit 1; }
    done
    wait_for "default namespace" 30 kctl get namespace default
    log "cluster up in $(( $(date +%s) - t0 ))s: export KUBECONFIG=$dir/kubeconfig"
}

down() {
    stop_all
    rm -f "$dir/kubeconfig" "$dir/bindir" "$dir/kwok-stages.yaml" "$dir/scheduler-port"
    log "cluster down"
}

status() {
    local p
    for p in "${PROCS[@]}"; do
        if pid_alive "$p"; then echo "$p: running (pid $(cat "$dir/pids/$p"))"; else echo "$p: stopped"; fi
    done
    if running; then echo "apiserver: ready (KUBECONFIG=$dir/kubeconfig)"; return 0; fi
    echo "apiserver: not ready"
    return 1
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    env)
        running || { log "cluster is not running: hack/cluster.sh up"; exit 1; }
        echo "export KUBECONFIG=$dir/kubeconfig"
        echo "export PATH=$(cat "$dir/bindir"):\$PATH"
        ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac

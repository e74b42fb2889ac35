#!/usr/bin/env bash
# The real-account smoke test of the aws provider: what moto cannot show. Needs credentials and costs
# money (about $0.30: one g6.xlarge on-demand and one on spot for ~15 minutes), so it never runs in CI.
#
#   CLUSTER=my-cluster REGION=us-east-1 hack/aws-smoke.sh
#
# Before: an EKS cluster that went through docs/aws.md "Getting started" (node role JoinerNodeRole-$CLUSTER
# with its access entry, discovery tags joiner.sh/discovery=$CLUSTER on subnets and the node security
# group, the interruption queue and rules, the NVIDIA device plugin), joiner running in it with
# --provider aws, kubectl pointed at it, and the aws CLI (v2) and jq installed.
#
# It then:
#   1. applies an EC2NodeClass and a NodePool limited to g6.xlarge, every resource tagged
#      joiner.sh/smoke=$RUN, and runs `joiner aws check` on the class (stops on any ✘);
#   2. runs one GPU pod on spot and one on on-demand: each node launches, joins, shows
#      nvidia.com/gpu=1, and the pod's nvidia-smi succeeds;
#   3. interrupts the spot instance through AWS Fault Injection Service
#      (aws:ec2:send-spot-instance-interruptions, 2 minutes' notice): joiner drains the node and the
#      pod runs again on a fresh node;
#   4. deletes what it applied, waits for joiner to terminate the instances, then lists everything
#      still tagged joiner.sh/smoke=$RUN (instances, volumes, network interfaces, launch templates)
#      and deletes it, with the FIS template and role; exits 1 if anything had been left behind.
# Cleanup also runs on failure or Ctrl-C.
set -euo pipefail

: "${CLUSTER:?set CLUSTER to the name of the EKS cluster}"
REGION=${REGION:-$(aws configure get region)}
: "${REGION:?set REGION}"
RUN=${RUN:-smoke-$(date +%Y%m%d%H%M%S)}
NS=${NS:-default}
TIMEOUT=${TIMEOUT:-900}        # seconds for a node to launch and join, or a pod to run
JOINER=${JOINER:-joiner}       # the CLI, for `joiner aws check`
ACCOUNT=$(aws sts get-caller-identity --query Account --output text)
FIS_ROLE=joiner-smoke-fis-$RUN
left_behind=0

log() { printf '[aws-smoke %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
aws() { command aws --region "$REGION" "$@"; }

manifests() {
    cat <<EOF
apiVersion: joiner.sh/v1
kind: EC2NodeClass
metadata: {name: $RUN}
spec:
  role: JoinerNodeRole-$CLUSTER
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {joiner.sh/discovery: $CLUSTER}}]
  securityGroupSelectorTerms: [{tags: {joiner.sh/discovery: $CLUSTER}}]
  tags: {joiner.sh/smoke: $RUN}
---
apiVersion: joiner.sh/v1
kind: NodePool
metadata: {name: $RUN}
spec:
  template:
    spec:
      nodeClassRef: {group: joiner.sh, kind: EC2NodeClass, name: $RUN}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [g6.xlarge]}
        - {key: joiner.sh/capacity-type, operator: In, values: [spot, on-demand]}
      taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
  limits: {nvidia.com/gpu: "3"}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 30s}
EOF
}

gpu_pod() { # gpu_pod <name> <capacity type>
    cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS, labels: {joiner.sh/smoke: $RUN}}
spec:
  restartPolicy: OnFailure
  nodeSelector: {joiner.sh/nodepool: $RUN, joiner.sh/capacity-type: $2}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
    - name: cuda
      image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04  # its NVIDIA_DRIVER_CAPABILITIES bring nvidia-smi in
      command: ["sh", "-c", "nvidia-smi -L && sleep 3600"]
      resources: {limits: {nvidia.com/gpu: 1}}
EOF
}

wait_for() { # wait_for <what> <command...>: until the command succeeds, or TIMEOUT
    local what=$1 start=$SECONDS
    shift
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS - start > TIMEOUT)); then
            log "timed out waiting for $what"
            return 1
        fi
        sleep 10
    done
    log "$what after $((SECONDS - start)) s"
}

pod_running() { [ "$(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}')" = Running ]; }
node_of() { kubectl -n "$NS" get pod "$1" -o jsonpath='{.spec.nodeName}'; }
node_has_gpu() { [ "$(kubectl get node "$1" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = 1 ]; }
instance_of() { kubectl get node "$1" -o jsonpath='{.spec.providerID}' | awk -F/ '{print $NF}'; }

tagged() { # tagged <ec2 describe call> <query>: ids of resources tagged for this run
    aws ec2 "$1" --filters "Name=tag:joiner.sh/smoke,Values=$RUN" --query "$2" --output text | tr '\t' '\n' | grep . || true
}

cleanup() {
    set +e
    log "cleaning up $RUN"
    kubectl -n "$NS" delete pod -l "joiner.sh/smoke=$RUN" --wait=false >/dev/null 2>&1
    kubectl delete nodepool "$RUN" --wait=false >/dev/null 2>&1
    local start=$SECONDS
    while [ -n "$(kubectl get nodeclaims -l "joiner.sh/nodepool=$RUN" -o name 2>/dev/null)" ] && ((SECONDS - start < 600)); do
        sleep 10
    done
    kubectl delete ec2nodeclass "$RUN" --wait=true --timeout=120s >/dev/null 2>&1
    local ids
    ids=$(tagged describe-instances 'Reservations[].Instances[?State.Name!=`terminated`].InstanceId')
    if [ -n "$ids" ]; then
        log "left behind: instances $ids -- terminating"
        left_behind=1
        # shellcheck disable=SC2086
        aws ec2 terminate-instances --instance-ids $ids >/dev/null
        # shellcheck disable=SC2086
        aws ec2 wait instance-terminated --instance-ids $ids
    fi
    for v in $(tagged describe-volumes 'Volumes[?State==`available`].VolumeId'); do
        log "left behind: volume $v -- deleting"; left_behind=1; aws ec2 delete-volume --volume-id "$v"
    done
    for e in $(tagged describe-network-interfaces 'NetworkInterfaces[?Status==`available`].NetworkInterfaceId'); do
        log "left behind: network interface $e -- deleting"; left_behind=1
        aws ec2 delete-network-interface --network-interface-id "$e"
    done
    # launch templates are the cluster's (joiner collects them itself within ~10 minutes): the run's own
    for t in $(aws ec2 describe-launch-templates --filters "Name=tag:joiner.sh/ec2nodeclass,Values=$RUN" \
        --query 'LaunchTemplates[].LaunchTemplateName' --output text); do
        aws ec2 delete-launch-template --launch-template-name "$t" >/dev/null
    done
    if [ -n "${template_id:-}" ]; then aws fis delete-experiment-template --id "$template_id" >/dev/null; fi
    aws iam detach-role-policy --role-name "$FIS_ROLE" \
        --policy-arn arn:aws:iam::aws:policy/service-role/AWSFaultInjectionSimulatorEC2Access >/dev/null 2>&1
    aws iam delete-role --role-name "$FIS_ROLE" >/dev/null 2>&1
    if ((left_behind)); then log "FAILED: joiner left resources behind (deleted now)"; exit 1; fi
    log "nothing left behind"
}
trap cleanup EXIT

log "run $RUN in $CLUSTER ($REGION, account $ACCOUNT)"
manifests | kubectl apply -f -
manifests | "$JOINER" aws check --nodeclass "$RUN" -f /dev/stdin --cluster-name "$CLUSTER" --region "$REGION"

for capacity in spot on-demand; do
    gpu_pod "gpu-$capacity" "$capacity" | kubectl apply -f -
done
for capacity in spot on-demand; do
    wait_for "pod gpu-$capacity running" pod_running "gpu-$capacity"
    node=$(node_of "gpu-$capacity")
    wait_for "node $node showing nvidia.com/gpu" node_has_gpu "$node"
    kubectl -n "$NS" logs "gpu-$capacity" | grep -q '^GPU 0:' || { log "nvidia-smi saw no GPU on $node"; exit 1; }
    log "$capacity: node $node ($(instance_of "$node")) runs gpu-$capacity"
done

spot_node=$(node_of gpu-spot)
spot_instance=$(instance_of "$spot_node")
log "interrupting $spot_instance through Fault Injection Service"
aws iam create-role --role-name "$FIS_ROLE" --assume-role-policy-document \
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "fis.amazonaws.com"}, "Action": "sts:AssumeRole"}]}' >/dev/null
aws iam attach-role-policy --role-name "$FIS_ROLE" \
    --policy-arn arn:aws:iam::aws:policy/service-role/AWSFaultInjectionSimulatorEC2Access
sleep 10 # IAM is eventually consistent
template_id=$(aws fis create-experiment-template --output text --query experimentTemplate.id --cli-input-json "$(jq -n \
    --arg role "arn:aws:iam::$ACCOUNT:role/$FIS_ROLE" \
    --arg arn "arn:aws:ec2:$REGION:$ACCOUNT:instance/$spot_instance" \
    --arg run "$RUN" '{
        description: "joiner smoke test: interrupt one spot instance",
        roleArn: $role,
        stopConditions: [{source: "none"}],
        targets: {spot: {resourceType: "aws:ec2:spot-instance", resourceArns: [$arn], selectionMode: "ALL"}},
        actions: {interrupt: {actionId: "aws:ec2:send-spot-instance-interruptions",
                              parameters: {durationBeforeInterruption: "PT2M"}, targets: {SpotInstances: "spot"}}},
        tags: {"joiner.sh/smoke": $run}
    }')")
aws fis start-experiment --experiment-template-id "$template_id" >/dev/null
node_gone() { ! kubectl get node "$spot_node" >/dev/null 2>&1; }
wait_for "interrupted node $spot_node gone" node_gone
wait_for "gpu-spot running again" pod_running gpu-spot
[ "$(node_of gpu-spot)" != "$spot_node" ] || { log "gpu-spot is still on the interrupted node"; exit 1; }
log "gpu-spot runs on $(node_of gpu-spot) after the interruption"
log "smoke test passed; cleaning up"

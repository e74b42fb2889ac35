"""Operator settings: every knob of the running controller, with the defaults users get."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Settings:
    # provisioning: a batch closes after `batch_idle` seconds without a new pod, or `batch_max` in all
    batch_idle_seconds: float = 1.0
    # every watch asks the apiserver to end it after this long; the informer then resumes from the
    # last resourceVersion it saw (and relists on 410 Gone)
    watch_timeout_seconds: float = 300.0
    batch_max_seconds: float = 10.0
    # tell kube-scheduler the plan through each planned pod's status.nominatedNodeName
    nominate: bool = True
    # ... and reserve each Node bought for pending pods to the pods planned there: the Node opens with
    # the `joiner.sh/planned=<NodeClaim>` taint, each planned pod gets its toleration (a pod spec
    # patch), and the taint goes once those pods are bound; off: nominations alone
    reserve: bool = True
    # also plan pods kube-scheduler has not tried yet once they waited this long (a scheduler backlog
    # in a large burst), instead of waiting for it to mark them unschedulable; None: never
    plan_untried_after_seconds: float | None = 2.0
    # NodeClaim lifecycle timeouts; each ends in deleting the NodeClaim with an Event saying why
    launch_timeout_seconds: float = 300.0
    registration_timeout_seconds: float = 900.0
    initialization_timeout_seconds: float = 900.0
    # an offering that returned insufficient capacity is avoided for this long
    unavailable_offering_ttl_seconds: float = 180.0
    # garbage collection of instances and Nodes that have no NodeClaim
    gc_interval_seconds: float = 60.0
    # disruption: a planning pass every `poll` seconds; a consolidation is checked again after
    # `validation_delay` seconds (the cluster moves) before anything is created or drained
    disruption_poll_interval_seconds: float = 10.0
    disruption_validation_delay_seconds: float = 15.0
    # gangs: the deadline of an attempt (NodePool spec.gang.timeout and the pods' annotation override
    # it), how long members may trickle in before an Event says who is missing, and the backoff
    # after a rollback (base, doubling, capped)
    gang_timeout_seconds: float = 900.0
    gang_member_wait_seconds: float = 60.0
    gang_backoff_seconds: float = 30.0
    gang_backoff_max_seconds: float = 600.0
    # ProvisioningRequests (Kueue): serve them when their CRD is installed (None: auto, False: never),
    # and how long capacity provisioned for one is held for its pods (cluster-autoscaler: 10 minutes)
    provisioning_requests: bool | None = None
    provisioning_request_booking_seconds: float = 600.0
    # idle GPUs: read DCGM utilization from this Prometheus (None: no idle-GPU marking at all); a node
    # whose GPUs stay below `threshold` percent for `window` seconds is marked GPUIdle
    prometheus_url: str | None = None
    gpu_idle_threshold_percent: float = 20.0
    gpu_idle_window_seconds: float = 600.0
    gpu_idle_poll_seconds: float = 30.0
    gpu_utilization_node_label: str = "Hostname"
    # leader election (client-go's semantics, controller/operator/leader.py): retry < renew deadline < lease
    leader_lease_seconds: float = 15.0
    leader_renew_deadline_seconds: float = 10.0
    leader_retry_period_seconds: float = 2.0
    # the controller's own namespace: its Lease and the forecast's history ConfigMap live there
    namespace: str = "kube-system"
    # serving
    metrics_port: int = 8080
    health_port: int = 8081
    bind_address: str = "0.0.0.0"

"""The ProvisioningRequest controller's reads: one request's ``RequestView`` from the cache (its pod
templates, its NodeClaims, its pods, the attempt record written and not cached yet, the booked nodes
that are gone), the solver's inputs, and the request's pods as the solver's placeholders. Reads
only; what to do is ``decide.py``'s, and the writes are ``effects.py``'s and ``booker.py``'s.
"""

from __future__ import annotations

import contextlib

from controller.context import Context
from controller.gang.planner import pinned_pod
from controller.provreq.decide import Attempt, RequestView, attempt_of
from controller.provreq.manifest import ANNOTATION_REQUEST, LABEL_REQUEST_UID
from controller.provreq.request import ANNOTATION_CONSUME, ProvisioningRequest, placeholder_pods
from controller.scheduling import kubeconv, kubeconv_volumes
from controller.scheduling.model import Pod
from controller.state import inputs as state_inputs
from controller.state.inputs import SolverInputs
from controller.state.views import NodeClaimView, PodView


class RequestReader:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._written: dict[str, Attempt] = {}  # request uid -> the record written, until the cache has it

    # --- the records written -----------------------------------------------------------------

    def wrote(self, uid: str, attempt: Attempt) -> None:
        """The attempt's record is being written on the request: seen as its record from now on."""
        self._written[uid] = attempt

    def done(self, uid: str) -> None:
        """Nothing more will be written for the request."""
        self._written.pop(uid, None)

    def forget_gone(self) -> None:
        """Drop the records of requests that are gone."""
        live = {
            str((r.get("metadata") or {}).get("uid")) for r in self.ctx.cluster.store("ProvisioningRequest").values()
        }
        for uid in [u for u in self._written if u not in live]:
            del self._written[uid]

    # --- the view ----------------------------------------------------------------------------

    def claims(self, *, uid: str | None, key: str) -> dict[str, NodeClaimView]:
        """NodeClaims bought for the request: by its uid, or (``uid=None``, the request is gone) by name."""
        out: dict[str, NodeClaimView] = {}
        for claim in [*self.ctx.cluster.claim_views().values(), *self.ctx.writer.in_flight()]:
            if uid is not None and claim.labels.get(LABEL_REQUEST_UID) != uid:
                continue
            if uid is None and claim.annotations.get(ANNOTATION_REQUEST) != key:
                continue
            out.setdefault(claim.name, claim)
        return out

    def consumers(self, req: ProvisioningRequest) -> tuple[list[PodView], list[PodView]]:
        """The request's pods (Kueue annotates them): bound (finished ones too: they were bound), and pending."""
        bound: list[PodView] = []
        pending: list[PodView] = []
        for pod in self.ctx.cluster.pod_views():
            if pod.namespace != req.namespace or pod.annotations.get(ANNOTATION_CONSUME) != req.name:
                continue
            if pod.node_name:
                bound.append(pod)  # a pod that ran and finished (kwok, a short Job) did bind
            elif not pod.is_terminal and not pod.deleting:
                pending.append(pod)
        return bound, pending

    def view(self, req: ProvisioningRequest) -> RequestView:
        store = self.ctx.cluster.store("PodTemplate")
        templates = {
            s.template: store[f"{req.namespace}/{s.template}"]
            for s in req.pod_sets
            if f"{req.namespace}/{s.template}" in store
        }
        attempt = attempt_of(req.annotations)
        written = self._written.get(req.uid)
        if written is not None and (attempt is None or written.number > attempt.number or written != attempt):
            # what we wrote last and the cache does not show yet
            attempt = written if attempt is None or written.number >= attempt.number else attempt
        bound, pending = self.consumers(req)
        return RequestView(
            request=req,
            templates=templates,
            claims=self.claims(uid=req.uid, key=req.key),
            attempt=attempt,
            consumers_bound=len(bound),
            consumers_pending=len(pending),
            booked_gone=self._booked_gone(req.key),
        )

    def _booked_gone(self, key: str) -> tuple[str, ...]:
        """The nodes (or NodeClaims) the request's published booking keeps that are gone or going."""
        booking = self.ctx.bookings.get(key)
        if booking is None:
            return ()
        cluster = self.ctx.cluster
        nodes = cluster.node_views()
        claims = cluster.claim_views()
        out: list[str] = []
        for name in sorted(booking.nodes):
            node = nodes.get(name)
            if node is not None:
                claim = cluster.claim_view_for_node(node)
                if node.deletion_timestamp or (claim is not None and claim.deleting):
                    out.append(name)
                continue
            claim = claims.get(name) or self.ctx.writer.just_created(name)
            if claim is None or claim.deleting:
                out.append(name)
        return tuple(out)

    # --- solver inputs -----------------------------------------------------------------------

    async def inputs(self) -> SolverInputs:
        ctx = self.ctx
        pools = await state_inputs.offered_pools(ctx.cluster, ctx.cloud, component="provisioningrequest")
        existing = state_inputs.machines(ctx.cluster, pools, in_flight=ctx.writer.in_flight())
        return state_inputs.solver_inputs(
            ctx.cluster,
            pools,
            existing=existing,
            unavailable=ctx.unavailable.current(),
            component="provisioningrequest",
        )

    def placeholders(self, view: RequestView, *, gid: str | None = None) -> tuple[list[Pod], list[str]]:
        pods: list[Pod] = []
        problems: list[str] = []
        for obj in placeholder_pods(view.request, view.templates):
            why = kubeconv.unplannable(obj.get("spec") or {})
            if why is not None:
                problems.append(f"pod template {(obj.get('metadata') or {}).get('name')}: {why}")
                continue
            try:
                pinned = pinned_pod(obj, gid) if gid is not None else obj
                pod = kubeconv.pod_from_dict(pinned, gang=gid, detect_gang=False)
            except ValueError as err:
                problems.append(str(err))
                continue
            if kubeconv_volumes.has_claims(pinned.get("spec") or {}):
                # where the template's claims let its pods run; a claim not resolvable now (not bound
                # yet, an ephemeral one of a pod to come) leaves the placeholder where it was
                with contextlib.suppress(ValueError):
                    pod = self.ctx.cluster.volumes_of(pod, pinned)
            pods.append(pod)
        return pods, problems

"""What joiner writes on gang pods and NodeClaims, and that writing it twice changes nothing."""

from __future__ import annotations

from controller.gang.patches import attempt_id, claim_name, pin_patch, record_patch, ungate_patch
from controller.gang.planner import gang_toleration
from controller.gang.record import Record, record_of
from controller.state.views import PodView
from tests.unit.fakeapi import apply_json_patch, apply_merge_patch
from tests.unit.gang.builders import GID, member

REC = Record(seq=1, attempt=1, id="abc123", phase="Provisioning", nodeclaims=("a", "b"))


def test_pinning_tightens_the_pod_to_the_gang_and_records_the_attempt() -> None:
    pod = member("w0")
    pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    pod["spec"]["nodeSelector"] = {"joiner.sh/gpu-name": "H100"}
    pinned = apply_merge_patch(pod, pin_patch(PodView.of(pod), GID, REC))
    assert pinned["spec"]["nodeSelector"] == {"joiner.sh/gpu-name": "H100", "joiner.sh/gang": GID}
    assert pinned["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}, gang_toleration(GID)]
    assert record_of(PodView.of(pinned)) == REC
    # twice is the same as once, and a pinned pod only gets the record
    assert apply_merge_patch(pinned, pin_patch(PodView.of(pinned), GID, REC)) == pinned
    assert set(pin_patch(PodView.of(pinned), GID, REC)) == {"metadata"}


def test_the_gate_is_removed_where_it_is_and_nothing_else_goes() -> None:
    pod = member("w0", pinned=True, record=REC)
    pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}, {"name": "joiner.sh/gang"}]
    admitted = REC.next(phase="Admitted")
    patch = ungate_patch(PodView.of(pod), admitted)
    assert patch is not None
    assert patch[0] == {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "joiner.sh/gang"}
    released = apply_json_patch(pod, patch)
    assert released["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]
    assert record_of(PodView.of(released)) == admitted
    assert ungate_patch(PodView.of(released), admitted) is None


def test_a_record_patch_only_touches_the_record() -> None:
    pod = member("w0")
    out = apply_merge_patch(pod, record_patch(REC))
    assert out["spec"] == pod["spec"]
    assert out["metadata"]["annotations"]["joiner.sh/gang-size"] == "3"


def test_attempt_ids_and_names_are_stable_and_short() -> None:
    first = attempt_id(GID, 1, ["b", "a"])
    assert first == attempt_id(GID, 1, ["a", "b"])
    assert first != attempt_id(GID, 2, ["a", "b"])
    assert first != attempt_id(GID, 1, ["a", "c"]), "new pods, new attempt"
    name = claim_name("x" * 100, first, 31)
    assert len(name) <= 63
    assert name.endswith(f"-g{first}-31")

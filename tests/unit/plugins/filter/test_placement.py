"""pod_placement: the filter kai_pilot's half-GPU step reads its pod with (module_utils/smoke_checks.placement)."""
import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.smshare.kai.plugins.filter.placement import FilterModule, pod_placement

POD = {"metadata": {"name": "half-gpu", "uid": "u1"},
       "spec": {"schedulerName": "kai-scheduler", "nodeName": "gpu-node-01"}}
EVENT = {"reason": "Scheduled", "message": "Successfully assigned gpu-trial/half-gpu to node gpu-node-01",
         "source": {"component": "kai-scheduler"}, "involvedObject": {"uid": "u1"}}


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"pod_placement": pod_placement}


def test_a_pod_kai_placed():
    assert pod_placement(POD, [EVENT], scheduler="kai-scheduler") == {
        "scheduler_name": "kai-scheduler", "node": "gpu-node-01", "placed_by": "kai-scheduler",
        "message": "Successfully assigned gpu-trial/half-gpu to node gpu-node-01",
        "waiting": "no PodScheduled condition: no scheduler looked at it", "ok": True, "problem": None}


@pytest.mark.parametrize("pod", [None, {}])
def test_a_pod_not_found_is_not_placed(pod):
    found = pod_placement(pod, None, scheduler="kai-scheduler")
    assert found["problem"] == "not_placed" and found["node"] == "" and not found["ok"]


@pytest.mark.parametrize("pod, events, scheduler, words", [
    (["not", "a", "pod"], [], None, "expected a Pod object"),
    (POD, {"reason": "Scheduled"}, None, "events must be a list"),
    (POD, [EVENT], "", "scheduler must be"),
    (POD, [EVENT], 3, "scheduler must be"),
])
def test_bad_input_is_named(pod, events, scheduler, words):
    with pytest.raises(AnsibleFilterError, match=words):
        pod_placement(pod, events, scheduler=scheduler)

"""smshare.kai.node_state against the lab's real API server, on a Node object
of its own (no kubelet behind it, so no other test's node is touched): the
patch, the Event kubectl describe node shows, check mode, diff, a second run."""
import json
import os

import pytest

from lab_helpers import module_on_localhost

pytestmark = [pytest.mark.lab, pytest.mark.second_lab]

NODE = f"smshare-test-node-state-{os.getpid()}"
LABEL = "smshare.kai/driver-upgrade-state"
TARGET = "smshare.kai/driver-upgrade-target"


def mark(lab, *flags, **args):
    """The module once, on localhost, as a play would run it; its result as a dict."""
    return module_on_localhost(lab, "smshare.kai.node_state", dict({"name": NODE, "kubeconfig": str(lab.kubeconfig)}, **args),
                               *flags)


def read(lab):
    """The Node's labels and annotations of this test's own keys (the node controller adds its own), and its cordon."""
    found = json.loads(lab.kubectl("get", "node", NODE, "-o", "json").stdout)
    ours = ("smshare.kai/", "keep")
    return ({k: v for k, v in (found["metadata"].get("labels") or {}).items() if k.startswith(ours)},
            {k: v for k, v in (found["metadata"].get("annotations") or {}).items() if k.startswith(ours)},
            bool(found["spec"].get("unschedulable")))


def events(lab):
    found = json.loads(lab.kubectl("-n", "kube-system", "get", "events", "-o", "json", "--field-selector",
                                   f"involvedObject.kind=Node,involvedObject.name={NODE}").stdout)["items"]
    found = [e for e in found if e["reason"].startswith("DriverUpgrade")]    # not the node controller's
    return [(e["reason"], e["type"], e["message"]) for e in sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))]


@pytest.fixture
def node(lab):
    def clean():
        lab.kubectl("delete", "node", NODE, "--ignore-not-found")
        lab.kubectl("-n", "kube-system", "delete", "events", "--field-selector", f"involvedObject.name={NODE}",
                    check=False)
    clean()
    lab.kubectl("create", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"smshare.kai/test": "node-state"}, "annotations": {"keep": "me"}}}))
    yield lab
    clean()


def test_a_state_is_one_patch_and_its_event_and_a_second_run_changes_nothing(node):
    lab = node
    args = {"labels": {LABEL: "cordon-required"}, "annotations": {TARGET: 615}, "unschedulable": True}
    event = {"reason": "DriverUpgrade", "note": "cordon-required: cordoned for the driver upgrade",
             "component": "smshare.kai.driver_upgrade"}

    checked = mark(lab, "--check", "--diff", **args, event=event)
    assert checked["changed"] and checked["diff"]["after"] == {
        "labels": {LABEL: "cordon-required"}, "annotations": {TARGET: "615"}, "unschedulable": True}, checked
    assert read(lab) == ({"smshare.kai/test": "node-state"}, {"keep": "me"}, False) and events(lab) == []

    first = mark(lab, **args, event=event)
    assert first["changed"] and first["patched"] and first["event"].startswith(NODE + "."), first
    labels, annotations, cordoned = read(lab)
    assert labels == {"smshare.kai/test": "node-state", LABEL: "cordon-required"}
    assert annotations == {"keep": "me", TARGET: "615"} and cordoned
    assert events(lab) == [("DriverUpgrade", "Normal", "cordon-required: cordoned for the driver upgrade")]
    assert "cordon-required: cordoned for the driver upgrade" in lab.kubectl("describe", "node", NODE).stdout

    again = mark(lab, **args)
    assert not again["changed"] and not again["patched"], again

    cleared = mark(lab, "--diff", annotations={TARGET: None}, unschedulable=False,
                   event={"reason": "DriverUpgradeBlocked", "type": "Warning", "note": "blocked: x"})
    assert cleared["diff"]["before"]["annotations"] == {TARGET: "615"}
    assert read(lab) == ({"smshare.kai/test": "node-state", LABEL: "cordon-required"}, {"keep": "me"}, False)
    assert events(lab)[-1] == ("DriverUpgradeBlocked", "Warning", "blocked: x")


def test_a_node_that_is_not_there_is_named_and_bad_input_writes_nothing(node):
    lab = node
    missing = mark(lab, name=NODE + "-gone", labels={LABEL: "x"}, event={"reason": "DriverUpgrade", "note": "m"})
    assert missing["failed"] and missing["failure"] == "node_missing" and f"Node {NODE}-gone is not in the cluster" in missing["msg"]
    bad = mark(lab, labels={LABEL: "not a value"}, unschedulable=True)
    assert bad["failed"] and bad["failure"] == "bad_input" and "must be a label value" in bad["msg"]
    assert read(lab)[2] is False and events(lab) == []


def test_steps_enter_each_state_in_turn_in_one_run(node):
    lab = node
    steps = [{"labels": {LABEL: "upgrade-required"}, "annotations": {TARGET: 615},
              "event": {"reason": "DriverUpgrade", "note": "upgrade-required: moving to branch 615"}},
             {"labels": {LABEL: "cordon-required"}, "unschedulable": True,
              "event": {"reason": "DriverUpgrade", "note": "cordon-required: cordoned for the driver upgrade"}}]

    checked = mark(lab, "--check", "--diff", steps=steps)
    assert checked["changed"] and [s["patched"] for s in checked["steps"]] == [True, True], checked
    assert read(lab) == ({"smshare.kai/test": "node-state"}, {"keep": "me"}, False) and events(lab) == []

    entered = mark(lab, steps=steps)
    assert entered["changed"] and [s["patched"] for s in entered["steps"]] == [True, True], entered
    assert read(lab) == ({"smshare.kai/test": "node-state", LABEL: "cordon-required"}, {"keep": "me", TARGET: "615"}, True)
    # One Event per step, in the order the states were entered.
    assert [m for _r, _t, m in events(lab)] == ["upgrade-required: moving to branch 615",
                                                "cordon-required: cordoned for the driver upgrade"]

    # Where it is already (a re-run resumes from its label): nothing to patch.
    again = mark(lab, steps=[{k: v for k, v in steps[1].items() if k != "event"}])
    assert not again["changed"] and [s["patched"] for s in again["steps"]] == [False], again

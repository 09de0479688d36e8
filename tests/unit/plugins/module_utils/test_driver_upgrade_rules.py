# Apache-2.0
"""The rollout's rules beyond the plan (tests/unit/plugins/filter/test_driver_upgrade.py):
the states still ahead of a node, each wait's check, a failed node's labels, the report."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import driver_upgrade as rules

AGAIN = "Then run the rollout again: the node resumes where it stopped."


def node(name="n1", ready="True", labels=None, conditions=None, reason="KubeletReady", message="posting ready"):
    return {"metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": message}]
                       + list(conditions or [])}}


def pod(name, phase="Running", ready=True):
    return {"metadata": {"name": name}, "status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


# ---------------------------------------------------------------- where a node resumes
@pytest.mark.parametrize("labels, annotations, todo", [
    ({}, {}, rules.STATES),
    ({rules.ROLLOUT_LABEL: "drain-required"}, {rules.TARGET_ANNOTATION: "615"}, rules.STATES[4:]),
    ({rules.ROLLOUT_LABEL: "validation-required"}, {rules.TARGET_ANNOTATION: "615"},
     ["validation-required", "uncordon-required", "upgrade-done"]),
    ({rules.ROLLOUT_LABEL: "upgrade-failed"}, {rules.TARGET_ANNOTATION: "615"}, rules.STATES),   # starts over
    ({rules.ROLLOUT_LABEL: "drain-required"}, {rules.TARGET_ANNOTATION: "620"}, rules.STATES),   # another branch
])
def test_the_states_ahead_of_a_node_start_where_it_resumes(labels, annotations, todo):
    subject = node(labels=labels)
    subject["metadata"]["annotations"] = annotations
    assert rules.node_view("n1", subject, 580, 615)["todo"] == todo


def test_a_step_runs_when_its_state_is_ahead():
    subject = node(labels={rules.ROLLOUT_LABEL: "pod-restart-required"})
    subject["metadata"]["annotations"] = {rules.TARGET_ANNOTATION: "615"}
    todo = rules.node_view("n1", subject, 580, 615)["todo"]
    assert "cordon-required" not in todo and "drain-required" not in todo
    assert "pod-restart-required" in todo and "validation-required" in todo


# ---------------------------------------------------------------- the checks the waits end on
def test_agents_left():
    assert rules.agents_left([], 300) == {"ok": True, "done": True, "rows": [], "message": (
        "0 fractioning agent pod(s) still on the node after driver_upgrade_agent_timeout (300 s): . Their DaemonSets "
        "must keep off a node whose nvidia.com/gpu-driver-upgrade-state label is set to anything but upgrade-done (a "
        "nodeAffinity on it, as the fractioning operator writes); the driver was not changed")}
    left = rules.agents_left([pod("mpsd-a"), pod("fractiond-b")], 300)
    assert not left["ok"] and left["message"].startswith(
        "2 fractioning agent pod(s) still on the node after driver_upgrade_agent_timeout (300 s): mpsd-a, fractiond-b.")


def test_agents_back_says_the_timeout_when_given():
    back = rules.agents_back([pod("mpsd-a", ready=False)], 2, 600)
    assert back["message"] == ("0 of the 2 fractioning agent pod(s) the node ran are back and Ready (mpsd-a) after "
                               "driver_upgrade_agent_timeout (600 s). A node without MPS would cap no fraction: it "
                               "stays cordoned")


def test_mps_clients():
    rows = [{"text": "MPS client pid 7 attached to server pid 3: end it"}]
    attached = rules.mps_clients({"state": {"clients": [{"pid": 7}]}}, rows, 3, "/run/nvidia-mps")
    assert (attached["ok"], attached["done"]) == (False, False)
    assert attached["message"] == ("1 MPS client(s) still attached after driver_upgrade_holders_timeout (3 s), so the "
                                   "driver was not changed: MPS client pid 7 attached to server pid 3: end it. " + AGAIN)
    # The wait reads it before the pods are read: the clients are counted all the same.
    assert not rules.mps_clients({"state": {"clients": [{"pid": 7}]}}, None, 3, "/run/nvidia-mps")["done"]
    assert rules.mps_clients({"state": {"clients": []}}, [], 3, "/run/nvidia-mps")["ok"]
    failed = rules.mps_clients({"failed": True, "msg": "no daemon"}, None, 3, "/run/nvidia-mps")
    assert (failed["ok"], failed["done"]) == (False, True)
    assert failed["message"] == ("Reading the MPS daemon of /run/nvidia-mps failed: no daemon "
                                 "(driver_upgrade_mps_pipe_directory: empty to not read it). " + AGAIN)


HOLDER = {"name": "pid 42 (sleep)", "text": "pid 42 (sleep) has /dev/nvidia0 open: stop it"}


@pytest.mark.parametrize("pods_read, processes, pod_holders, ok, done, message", [
    ({"resources": []}, {"holders": [], "unreadable": 0}, [], True, True, None),
    ({"resources": []}, None, [], True, True, None),   # the pods' wait: processes not read yet
    ({"msg": "Unauthorized"}, None, [], False, True, "Reading the pods on the node failed: Unauthorized. " + AGAIN),
    ({"resources": []}, {"msg": "not root"}, [], False, True, "Reading what holds the GPUs failed: not root. " + AGAIN),
    ({"resources": []}, {"holders": [], "unreadable": 2}, [], False, True,
     "The open files of 2 process(es) could not be read: the check needs root on the node (become). " + AGAIN),
    ({"resources": []}, {"holders": [HOLDER], "unreadable": 0}, [], False, False,
     "1 still hold a GPU after driver_upgrade_holders_timeout (4 s), so the driver was not changed: pid 42 (sleep). "
     "pid 42 (sleep) has /dev/nvidia0 open: stop it. " + AGAIN),
    ({"resources": []}, None, [{"name": "pod ns/a", "text": "pod ns/a requests nvidia.com/gpu"}], False, False,
     "1 still hold a GPU after driver_upgrade_holders_timeout (4 s), so the driver was not changed: pod ns/a. "
     "pod ns/a requests nvidia.com/gpu. " + AGAIN),
])
def test_gpu_holders(pods_read, processes, pod_holders, ok, done, message):
    found = rules.gpu_holders(pods_read, processes, pod_holders, 4)
    assert (found["ok"], found["done"]) == (ok, done)
    if message:
        assert found["message"] == message


def test_bare_pods():
    left = [{"namespace": "ns", "name": "holdout", "text": "pod ns/holdout (bare): stop"}]
    stop = rules.bare_pods(left, 3, "stop")
    assert (stop["ok"], stop["done"]) == (False, False)
    assert stop["message"] == (
        "1 bare pod(s) still on the node after driver_upgrade_bare_pods_timeout (3 s), so it was not drained and its "
        "driver was not changed: ns/holdout. The drain cannot evict a pod no controller manages. Let them finish or "
        "delete them (kubectl delete pod -n NAMESPACE NAME), or set driver_upgrade_bare_pods=delete to have the rollout "
        "delete them. " + AGAIN + " pod ns/holdout (bare): stop.")
    assert rules.bare_pods(left, 3, "delete")["ok"], "the policy deletes them"
    assert rules.bare_pods([], 3, "stop")["done"]


LABEL = "nvidia.com/cuda.driver-version.major"


@pytest.mark.parametrize("nodes, label, ok, words", [
    ([node(labels={LABEL: "615"})], LABEL, True, "is Ready on branch 615"),
    ([node(labels={LABEL: "615"})], "", True, "is Ready on branch 615"),
    ([], LABEL, False, "the Node n1 is gone from the API server. The node stays cordoned"),
    ([node(ready="False", reason="KubeletNotReady", message="PLEG")], LABEL, False,
     "the Node n1 is not Ready (KubeletNotReady: PLEG). The node stays cordoned"),
    ([node(labels={LABEL: "580"})], LABEL, False, "is Ready but its label nvidia.com/cuda.driver-version.major says 580, "
                                                  "not 615 (is GPU Feature Discovery running on it?)"),
    ([node()], LABEL, False, "says nothing, not 615"),
])
def test_node_ready(nodes, label, ok, words):
    found = rules.node_ready(nodes, "n1", 615, label, 900)
    assert found["ok"] is ok and words in found["message"], found["message"]
    assert found["message"].startswith("After driver_upgrade_ready_timeout (900 s) the Node n1 ")


def test_agent_condition():
    kind = "gpu-fractioning.nvidia.com/Ready"
    up = node(conditions=[{"type": kind, "status": "True"}])
    assert rules.agent_condition([up], kind, 600)["ok"]
    down = node(conditions=[{"type": kind, "status": "False", "reason": "MpsdNotReady", "message": "no socket"}])
    assert rules.agent_condition([down], kind, 600)["message"] == (
        "The Node's condition gpu-fractioning.nvidia.com/Ready is False (MpsdNotReady: no socket) after "
        "driver_upgrade_agent_timeout (600 s): the fractioning agents are not ready on it. It stays cordoned")
    assert "is gone (no reason: )" in rules.agent_condition([node()], kind, 600)["message"]


@pytest.mark.parametrize("check, args", [
    (rules.agents_left, ({"items": []}, 1)),
    (rules.agents_back, ({"items": []}, 1)),
    (rules.mps_clients, ([], None, 1, "/run/nvidia-mps")),
    (rules.gpu_holders, ([], None, [], 1)),
    (rules.bare_pods, ({}, 1, "stop")),
    (rules.node_ready, ({}, "n1", 615, "", 1)),
])
def test_each_check_refuses_what_it_cannot_read(check, args):
    with pytest.raises(rules.RolloutError):
        check(*args)


# ---------------------------------------------------------------- a failed node's labels
@pytest.mark.parametrize("operator_state, keeps_agents", [
    ("", True), ("upgrade-done", True), ("pod-restart-required", False), ("validation-required", False),
    ("upgrade-failed", False),
])
def test_a_failed_node_sends_the_agents_off_only_where_they_had_left(operator_state, keeps_agents):
    labels = rules.failed_labels(node(labels={rules.STATE_LABEL: operator_state} if operator_state else {}))
    assert labels[rules.ROLLOUT_LABEL] == "upgrade-failed"
    assert (rules.STATE_LABEL not in labels) is keeps_agents


# ---------------------------------------------------------------- the report
def test_the_report_has_a_row_per_planned_node_and_says_whether_it_finished():
    plan = {"order": ["n1", "n2", "n3"], "skipped": ["n4"], "batches": [2, 1], "max_unavailable": 2,
            "nodes": {"n1": {"action": "upgrade", "reason": "loaded branch 580"},
                      "n2": {"action": "upgrade", "reason": "loaded branch 580"},
                      "n3": {"action": "upgrade", "reason": "loaded branch 580"},
                      "n4": {"action": "skip", "reason": "already on branch 615", "not_ready_since": ""}}}
    outcomes = [{"state": "upgrade-done", "driver": "615.71.09", "reason": "", "since": 86400, "seconds": 30.04,
                 "waited": "2.26"},
                {"state": "blocked", "driver": "580.95.05", "reason": "not cordoned", "since": 86460,
                 "seconds": 1, "waited": 0}, {}, {}]
    selves = [{"driver_version": "580.95.05"}] * 3 + [{"driver_version": "615.71.09"}]
    report = rules.report(plan, outcomes, selves, "615", 86000, 86500.04)
    assert report["finished"] is False and report["wall_seconds"] == 500.0 and report["branch"] == 615
    assert [(r["node"], r["state"], r["since"]) for r in report["nodes"]] == [
        ("n1", "upgrade-done", "1970-01-02T00:00:00Z"), ("n2", "blocked", "1970-01-02T00:01:00Z"),
        ("n3", "not started", "1970-01-01T23:53:20Z"), ("n4", "skipped", "1970-01-01T23:53:20Z")]
    assert report["nodes"][0] == {"node": "n1", "old_driver": "580.95.05", "new_driver": "615.71.09",
                                  "state": "upgrade-done", "since": "1970-01-02T00:00:00Z", "seconds": 30.0,
                                  "waited": 2.3, "note": ""}
    lines = rules.report_lines(report)
    assert lines[0].split() == ["node", "old", "driver", "new", "driver", "state", "since", "spent", "s", "waited", "s",
                                "note"]
    assert lines[1].startswith("n1                     580.95.05    615.71.09    upgrade-done")
    assert lines[-1] == "rollout to branch 615: 500.0 s wall, batches 2, 1"
    with pytest.raises(rules.RolloutError):
        rules.report(plan, outcomes[:2], selves, 615, 0, 1)


def test_the_plan_lines():
    plan = {"order": ["n1"], "skipped": ["n2"], "batches": [1], "max_unavailable": 1, "unavailable": [],
            "nodes": {"n1": {"action": "upgrade", "reason": "loaded branch 580"},
                      "n2": {"action": "skip", "reason": "already on branch 615"}}}
    assert rules.plan_lines(plan, 615) == [
        "Upgrade to branch 615: 1 node(s) in batches 1 (at most 1 unavailable; unavailable now: none)",
        "n1: upgrade (loaded branch 580)", "n2: skip (already on branch 615)"]


def test_an_agent_read_that_failed_proves_nothing():
    for found in (rules.agents_left(None, 300), rules.agents_back(None, 2)):
        assert (found["ok"], found["done"]) == (False, False)
        assert found["message"] == rules.UNREAD_AGENTS


DPKG = ["Setting up nvidia-dkms-615-open (615.71.09-0ubuntu1) ...", "Error! Bad return status for module build",
        "dpkg: error processing package nvidia-dkms-615-open (--configure):", "E: Sub-process /usr/bin/dpkg returned an "
        "error code (1)"]


@pytest.mark.parametrize("task, result, timeout, words, absent", [
    pytest.param("Install the driver", {"failed": True, "msg": "non-zero return code", "stdout_lines": DPKG}, None,
                 ["Install the driver: Error! Bad return status", "dpkg: error processing package nvidia-dkms-615-open"],
                 ["Sub-process", "non-zero return code"], id="apt-error-lines"),
    pytest.param("Check the node is Ready", {"failed": True, "msg": "Node x is NotReady\n  for 300 s."}, None,
                 ["Check the node is Ready: Node x is NotReady for 300 s."], [], id="a-message"),
    pytest.param(None, {}, None, ["a step: failed"], [], id="nothing-known"),
    pytest.param("Reboot to load the new NVIDIA driver", {
        "failed": True, "rebooted": True, "elapsed": 61,
        "msg": "Timed out waiting for last boot time check (timeout=60)"}, 60,
        ["Reboot to load the new NVIDIA driver: the node went down for its reboot and did not come back within "
         "nvidia_driver_reboot_timeout (60 s) (Timed out waiting for last boot time check (timeout=60)).",
         "Its new driver is installed", "then run the rollout again: it resumes this node"], [], id="never-back"),
    pytest.param("Reboot to load the new NVIDIA driver", {
        "failed": True, "rebooted": False, "msg": "Reboot command failed. Error was: 'x, y'"}, 60,
        ["Reboot command failed"], ["did not come back"], id="reboot-command-failed"),
    pytest.param("Install", {"failed": True, "msg": "x " * 400}, None, ["Install: x x"], [], id="cut-at-600"),
])
def test_failure_reason(task, result, timeout, words, absent):
    reason = rules.failure_reason(task, result, timeout)
    for word in words:
        assert word in reason, (word, reason)
    for word in absent:
        assert word not in reason, (word, reason)
    assert len(reason) <= 600 and "\n" not in reason

# Apache-2.0
"""node_state: the patch it plans from a Node, the Event it writes, and its
refusal of bad input (on a real API server: tests/integration/lab/test_node_state.py)."""
import re
from types import SimpleNamespace

import pytest

from ansible_collections.smshare.kai.plugins.modules import node_state

from module_runner import run_module

LABEL = "smshare.kai/driver-upgrade-state"
TARGET = "smshare.kai/driver-upgrade-target"


def node(labels=None, annotations=None, unschedulable=None):
    return {"labels": labels or {}, "annotations": annotations or {}, "unschedulable": unschedulable}


@pytest.mark.parametrize("current, labels, annotations, unschedulable, patch", [
    # already so: nothing to write
    (node({LABEL: "cordon-required"}, unschedulable=True), {LABEL: "cordon-required"}, {}, True, None),
    (node(), {}, {TARGET: None}, None, None),                        # removing what is not there
    (node(unschedulable=False), {}, {}, False, None),
    # only the keys that differ
    (node({LABEL: "upgrade-required", "other": "x"}), {LABEL: "cordon-required", "other": "x"}, {}, True,
     {"metadata": {"labels": {LABEL: "cordon-required"}}, "spec": {"unschedulable": True}}),
    (node(annotations={TARGET: "615", "keep": "1"}), {}, {TARGET: None, "absent": None}, False,
     {"metadata": {"annotations": {TARGET: None}}}),
    (node(unschedulable=True), {}, {}, False, {"spec": {"unschedulable": False}}),
    (node(unschedulable=True), {}, {}, None, None),                  # unset leaves the cordon alone
], ids=["same", "remove-absent", "uncordoned-already", "label-and-cordon", "annotation-removed", "uncordon",
        "cordon-untouched"])
def test_only_what_differs_is_patched(current, labels, annotations, unschedulable, patch):
    planned, after = node_state.plan(current, labels, annotations, unschedulable)
    assert planned == patch
    for key, value in labels.items():
        assert after["labels"].get(key) == value
    for key, value in annotations.items():
        assert after["annotations"].get(key) == value
    assert after["unschedulable"] == (bool(current["unschedulable"]) if unschedulable is None else unschedulable)


def test_the_diff_shows_the_keys_asked_for_only():
    current = node({LABEL: "drain-required", "kubernetes.io/hostname": "n1"}, {TARGET: "615"}, unschedulable=True)
    _patch, after = node_state.plan(current, {LABEL: "upgrade-done"}, {TARGET: None}, False)
    shown = node_state.diff(current, after, {LABEL: "upgrade-done"}, {TARGET: None}, False)
    assert shown == {"before": {"labels": {LABEL: "drain-required"}, "annotations": {TARGET: "615"}, "unschedulable": True},
                     "after": {"labels": {LABEL: "upgrade-done"}, "annotations": {TARGET: None}, "unschedulable": False}}


def test_the_event_names_the_node_as_kubectl_describe_node_matches_it():
    body = node_state.event_body("gpu-1", {"reason": "DriverUpgrade", "note": "x" * 1500, "type": "Warning",
                                           "component": "smshare.kai.driver_upgrade"})
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "gpu-1"}
    assert body["metadata"] == {"generateName": "gpu-1.", "namespace": "kube-system"}
    assert len(body["message"]) == 1000 and body["message"].endswith("...")
    assert (body["type"], body["reason"]) == ("Warning", "DriverUpgrade")
    assert body["source"] == {"component": "smshare.kai.driver_upgrade"}


def test_the_events_text_keeps_to_one_line():
    body = node_state.event_body("gpu-1", {"reason": "DriverUpgrade", "note": "upgrade-failed: apt said\nE: broken\x07",
                                           "type": "Warning", "component": "smshare.kai.driver_upgrade"})
    assert body["message"] == "upgrade-failed: apt said E: broken "


class FakeCore:
    """CoreV1Api's three calls the module makes with an older kubernetes library, recorded;
    event_fails makes the Event's write fail."""

    def __init__(self, current, event_fails=False):
        self.current, self.event_fails, self.calls = current, event_fails, []

    def read_node(self, name, **_):
        self.calls.append(("read", name))
        return SimpleNamespace(metadata=SimpleNamespace(labels=self.current["labels"], annotations=self.current["annotations"]),
                               spec=SimpleNamespace(unschedulable=self.current["unschedulable"]))

    def patch_node(self, name, body, **_):
        self.calls.append(("patch", name, body))

    def create_namespaced_event(self, namespace, body, **_):
        self.calls.append(("event", namespace, body["reason"], body["message"]))
        if self.event_fails:
            raise node_state.ApiException(status=403, reason="Forbidden")
        return SimpleNamespace(metadata=SimpleNamespace(name="gpu-1.abcde"))


def run_fake(monkeypatch, core, check_mode=False, **args):
    # A client that cannot make plain calls: the typed API is used.
    monkeypatch.setattr(node_state.cluster_access, "api_client", lambda *a: None)
    monkeypatch.setattr(node_state.kclient, "CoreV1Api", lambda _client: core)
    args = dict({"name": "gpu-1", "_ansible_check_mode": check_mode, "_ansible_diff": True}, **args)
    return run_module(monkeypatch, node_state.main, args)


EVENT = {"reason": "DriverUpgrade", "note": "cordon-required: cordoned"}


def test_a_change_is_one_merge_patch_then_its_event(monkeypatch):
    core = FakeCore(node({LABEL: "upgrade-required"}))
    done = run_fake(monkeypatch, core, labels={LABEL: "cordon-required"}, unschedulable=True, event=EVENT)
    assert not done.failed and done.result["changed"] and done.result["patched"]
    assert core.calls == [("read", "gpu-1"),
                          ("patch", "gpu-1", {"metadata": {"labels": {LABEL: "cordon-required"}}, "spec": {"unschedulable": True}}),
                          ("event", "kube-system", "DriverUpgrade", "cordon-required: cordoned")]
    assert done.result["event"] == "gpu-1.abcde" and done.result["unschedulable"] is True


def test_a_node_already_so_is_not_written_and_not_changed(monkeypatch):
    core = FakeCore(node({LABEL: "cordon-required"}, unschedulable=True))
    done = run_fake(monkeypatch, core, labels={LABEL: "cordon-required"}, unschedulable=True)
    assert not done.result["changed"] and core.calls == [("read", "gpu-1")]


def test_check_mode_reads_and_writes_nothing(monkeypatch):
    core = FakeCore(node())
    done = run_fake(monkeypatch, core, check_mode=True, labels={LABEL: "drain-required"}, event=EVENT)
    assert done.result["changed"] and done.result["event"] == "" and core.calls == [("read", "gpu-1")]
    assert done.result["diff"]["after"]["labels"] == {LABEL: "drain-required"}


def test_an_event_that_cannot_be_written_is_a_warning_and_the_change_stands(monkeypatch):
    core = FakeCore(node(), event_fails=True)
    done = run_fake(monkeypatch, core, labels={LABEL: "drain-required"}, event=EVENT)
    assert not done.failed and done.result["patched"] and done.result["event"] == ""
    assert "could not be written: 403 Forbidden" in done.result["event_error"]
    assert [c[0] for c in core.calls] == ["read", "patch", "event"]


def test_a_missing_node_is_named_and_nothing_written(monkeypatch):
    class Missing(FakeCore):
        def read_node(self, name, **_):
            raise node_state.ApiException(status=404, reason="Not Found")
    core = Missing(node())
    done = run_fake(monkeypatch, core, labels={LABEL: "x"}, event=EVENT)
    assert done.failed and done.result["failure"] == "node_missing" and "Node gpu-1 is not in the cluster" in done.result["msg"]
    assert core.calls == []


@pytest.mark.parametrize("args, words", [
    ({"name": "GPU_1"}, "must be a Node's name"),
    ({"labels": {"bad key!": "x"}}, "must be a Kubernetes qualified name"),
    ({"labels": {LABEL: "not ok!"}}, "must be a label value"),
    ({"labels": {LABEL: "x" * 64}}, "must be a label value"),
    ({"annotations": {TARGET: [615]}}, "must be a string or null"),
    ({"labels": {LABEL: True}}, "must be a string or null"),
    ({"event": {"reason": "driver upgrade", "note": "m"}}, "must be one CamelCase word"),
    ({"event": {"reason": "DriverUpgrade", "note": "  "}}, "must say what happened"),
    ({"event": {"reason": "DriverUpgrade", "note": "m", "component": "smshare kai"}}, "must be a Kubernetes qualified name"),
], ids=["node-name", "label-key", "label-value", "label-value-long", "annotation-not-text", "label-bool", "reason", "note-blank",
        "component"])
def test_bad_input_is_refused_before_the_cluster_is_asked(monkeypatch, args, words):
    done = run_module(monkeypatch, node_state.main, dict({"name": "gpu-1", "kubeconfig": "/nonexistent/kubeconfig"}, **args))
    assert done.failed and done.result["failure"] == "bad_input" and words in done.result["msg"], done.result


def test_a_kubeconfig_that_cannot_be_read_is_a_cluster_failure(monkeypatch, tmp_path):
    done = run_module(monkeypatch, node_state.main, {"name": "gpu-1", "kubeconfig": str(tmp_path / "none")})
    assert done.failed and done.result["failure"] == "cluster" and "cannot load kubeconfig" in done.result["msg"]


def test_a_number_is_set_as_its_text(monkeypatch):
    core = FakeCore(node(annotations={TARGET: "615"}))
    done = run_fake(monkeypatch, core, annotations={TARGET: 615, "smshare.kai/driver-upgrade-agents": 2})
    assert core.calls[1][2] == {"metadata": {"annotations": {"smshare.kai/driver-upgrade-agents": "2"}}}
    assert done.result["annotations"][TARGET] == "615"


def test_with_a_client_that_makes_plain_calls_the_same_three_calls_are_plain_json(monkeypatch):
    calls = []

    def plain_json(client, method, path, body=None, content_type="application/json", **_):
        calls.append((method, path, content_type, body and body.get("reason", body)))
        if method == "GET":
            return {"metadata": {"name": "gpu-1", "labels": {LABEL: "upgrade-done"}}, "spec": {"unschedulable": True}}
        return {"metadata": {"name": "gpu-1.x1y2z"}}
    monkeypatch.setattr(node_state.cluster_access, "api_client", lambda *a: "client")
    monkeypatch.setattr(node_state.cluster_access, "plain_calls", lambda client: client == "client")
    monkeypatch.setattr(node_state.cluster_access, "plain_json", plain_json)
    monkeypatch.setattr(node_state.kclient, "CoreV1Api", None)    # never built
    done = run_module(monkeypatch, node_state.main, {"name": "gpu-1", "annotations": {TARGET: None}, "unschedulable": False,
                                                     "labels": {LABEL: "upgrade-done"}, "event": EVENT})
    assert not done.failed and done.result["event"] == "gpu-1.x1y2z" and done.result["unschedulable"] is False
    assert calls == [("GET", "/api/v1/nodes/gpu-1", "application/json", None),
                     ("PATCH", "/api/v1/nodes/gpu-1", "application/merge-patch+json", {"spec": {"unschedulable": False}}),
                     ("POST", "/api/v1/namespaces/kube-system/events", "application/json", "DriverUpgrade")]


CORDON = {"labels": {LABEL: "cordon-required"}, "unschedulable": True, "event": EVENT}
UPGRADE = {"labels": {LABEL: "upgrade-required"}, "annotations": {TARGET: 615},
           "event": {"reason": "DriverUpgrade", "note": "upgrade-required: moving to 615"}}


def test_steps_are_entered_in_order_each_its_patch_then_its_event(monkeypatch):
    core = FakeCore(node())
    done = run_fake(monkeypatch, core, steps=[UPGRADE, CORDON])
    assert not done.failed and done.result["changed"] and done.result["patched"], done.result
    assert core.calls == [
        ("read", "gpu-1"),
        ("patch", "gpu-1", {"metadata": {"labels": {LABEL: "upgrade-required"}, "annotations": {TARGET: "615"}}}),
        ("event", "kube-system", "DriverUpgrade", "upgrade-required: moving to 615"),
        ("patch", "gpu-1", {"metadata": {"labels": {LABEL: "cordon-required"}}, "spec": {"unschedulable": True}}),
        ("event", "kube-system", "DriverUpgrade", "cordon-required: cordoned")]
    assert [s["patched"] for s in done.result["steps"]] == [True, True]
    assert done.result["labels"] == {LABEL: "cordon-required"} and done.result["unschedulable"] is True
    assert done.result["diff"] == {
        "before": {"labels": {LABEL: None}, "annotations": {TARGET: None}, "unschedulable": False},
        "after": {"labels": {LABEL: "cordon-required"}, "annotations": {TARGET: "615"}, "unschedulable": True}}


def test_steps_already_taken_write_nothing_and_an_empty_list_changes_nothing(monkeypatch):
    core = FakeCore(node({LABEL: "cordon-required"}, {TARGET: "615"}, unschedulable=True))
    done = run_fake(monkeypatch, core, steps=[{"labels": {LABEL: "cordon-required"}, "unschedulable": True}])
    assert not done.result["changed"] and core.calls == [("read", "gpu-1")]
    assert run_fake(monkeypatch, FakeCore(node()), steps=[]).result["changed"] is False


def test_steps_in_check_mode_are_planned_in_order_and_nothing_written(monkeypatch):
    core = FakeCore(node())
    done = run_fake(monkeypatch, core, check_mode=True, steps=[UPGRADE, CORDON])
    assert done.result["changed"] and core.calls == [("read", "gpu-1")]
    assert [s["patched"] for s in done.result["steps"]] == [True, True]
    assert done.result["diff"]["after"]["labels"] == {LABEL: "cordon-required"}


def test_a_refused_later_step_names_what_stands(monkeypatch):
    class RefusesTheCordon(FakeCore):
        def patch_node(self, name, body, **_):
            if "spec" in body:
                raise node_state.ApiException(status=403, reason="Forbidden")
            super().patch_node(name, body)
    core = RefusesTheCordon(node())
    done = run_fake(monkeypatch, core, steps=[UPGRADE, CORDON])
    assert done.failed and done.result["failure"] == "cluster" and done.result["entered"] == 1, done.result
    assert ("step 2 of Node gpu-1's change (%s=cordon-required, cordoned) was not made: 403 Forbidden. The 1 step(s) "
            "before it stand" % LABEL) in done.result["msg"]
    assert [c[0] for c in core.calls] == ["read", "patch", "event"]


def test_a_later_step_without_an_answer_names_what_stands(monkeypatch):
    class LosesTheServer(FakeCore):
        def patch_node(self, name, body, **_):
            if "spec" in body:
                raise ConnectionRefusedError("connection refused")
            super().patch_node(name, body)
    done = run_fake(monkeypatch, LosesTheServer(node()), steps=[UPGRADE, CORDON])
    assert done.failed and done.result["failure"] == "cluster" and done.result["entered"] == 1, done.result
    assert "was not made: connection refused" in done.result["msg"]


def test_the_events_time_is_in_microseconds_so_one_runs_steps_keep_their_order():
    body = node_state._stamp(node_state.event_body("gpu-1", {"reason": "DriverUpgrade", "note": "n", "type": "Normal",
                                                             "component": "smshare.kai.driver_upgrade"}))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", body["eventTime"])
    # kubectl describe sorts on lastTimestamp wherever one is set (whole seconds).
    assert "lastTimestamp" not in body and "firstTimestamp" not in body
    assert (body["reportingComponent"], body["action"]) == ("smshare.kai.driver_upgrade", "DriverUpgrade")
    assert body["reportingInstance"]


@pytest.mark.parametrize("args, words", [
    ({"labels": {LABEL: "x"}, "steps": [CORDON]}, "cannot be set beside steps"),
    ({"unschedulable": True, "steps": [CORDON]}, "unschedulable=True: cannot be set beside steps"),
    ({"steps": [CORDON, {"labels": {LABEL: "not ok!"}}]}, "steps[1].labels[%s]" % LABEL),
    ({"steps": [{"event": {"reason": "no way", "note": "m"}}]}, "steps[0].event.reason"),
], ids=["labels-beside", "cordon-beside", "step-label-value", "step-reason"])
def test_bad_steps_are_refused_before_the_cluster_is_asked(monkeypatch, args, words):
    done = run_module(monkeypatch, node_state.main, dict({"name": "gpu-1", "kubeconfig": "/nonexistent/kubeconfig"}, **args))
    assert done.failed and done.result["failure"] == "bad_input" and words in done.result["msg"], done.result


def test_an_api_server_that_does_not_answer_is_named_not_a_traceback(monkeypatch):
    class Silent(FakeCore):
        def read_node(self, name, **_):
            raise ConnectionRefusedError("[Errno 111] Connection refused")
    done = run_fake(monkeypatch, Silent(node()), labels={LABEL: "x"}, event=EVENT)
    assert done.failed and done.result["failure"] == "cluster", done.result
    assert "the API server did not answer for Node gpu-1: [Errno 111] Connection refused" in done.result["msg"]

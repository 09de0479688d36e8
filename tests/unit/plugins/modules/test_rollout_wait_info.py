# Apache-2.0
"""rollout_wait_info: the rollout's waits in one module run: what it reads for
each check, how long it waits, what it says at the timeout, and a server that
stops answering (the rules themselves: test_driver_upgrade_checks in
tests/unit/plugins/module_utils; on real Nodes: the fleet's rollout,
tests/integration/fleet/test_driver_upgrade.py)."""
import json
from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access
from ansible_collections.smshare.kai.plugins.modules import rollout_wait_info as module

from module_runner import run_module
from test_disruption_budgets_info import Clock, Response

NODE = "gpu-01"
SELECTOR = "app.kubernetes.io/component in (mpsd,fractiond)"


def node(ready="True", branch="615", condition=None):
    conditions = [{"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                   "message": ""}]
    if condition:
        conditions.append({"type": "gpu-fractioning.nvidia.com/Ready", "status": condition, "reason": "Agents",
                           "message": "mpsd and fractiond"})
    return {"metadata": {"name": NODE, "labels": {"nvidia.com/cuda.driver-version.major": branch}},
            "status": {"conditions": conditions}}


def agent(name, ready=True):
    return {"metadata": {"name": name, "namespace": "gpu-fractioning"}, "spec": {"nodeName": NODE},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}


class FakeApiServer:
    """The plain calls over the Node and the agents' pods; each read takes the next
    of `nodes` and `pods` (the last one stays); an entry that is an int is that HTTP status."""

    def __init__(self, nodes=(None,), pods=((),), node_pods=((),)):
        self.nodes, self.pods, self.node_pods, self.paths = list(nodes), list(pods), list(node_pods), []

    @staticmethod
    def _next(seq):
        return seq.pop(0) if len(seq) > 1 else seq[0]

    def param_serialize(self, method, resource_path, header_params, body, auth_settings):
        return method, "https://api" + resource_path, header_params, body, []

    def call_api(self, verb, url, header_params, body, post_params, _request_timeout):
        parts = urlsplit(url)
        self.paths.append((parts.path, parse_qs(parts.query)))
        answer = self._next(self.nodes if parts.path.startswith("/api/v1/nodes/") else
                            self.node_pods if parts.path == "/api/v1/pods" else self.pods)
        if isinstance(answer, int):
            return Response(answer, {"kind": "Status", "code": answer})
        if answer is None:
            return Response(404, {"kind": "Status", "code": 404})
        if parts.path.startswith("/api/v1/nodes/"):
            return Response(200, answer)
        return Response(200, {"kind": "PodList", "items": list(answer)})


def params(checks, **overrides):
    return dict({"node": NODE, "checks": checks, "timeout": 30, "poll_interval": 2, "branch": "615",
                 "driver_label": "nvidia.com/cuda.driver-version.major", "agent_namespace": "gpu-fractioning",
                 "agent_selector": SELECTOR, "agents_expected": 0, "condition": "gpu-fractioning.nvidia.com/Ready",
                 "state_label": "nvidia.com/gpu-driver-upgrade-state"}, **overrides)


def run(server, checks, **overrides):
    clock = Clock()
    return module.run(params(checks, **overrides), module.NodeReads(server), clock, clock.sleep)


def test_it_waits_for_the_node_to_be_ready_on_the_branch():
    server = FakeApiServer(nodes=[node(ready="False"), node(branch="580"), node()])
    result = run(server, ["node_ready"])
    assert result["ok"] and result["message"] == "" and result["waited"] == 4.0
    assert result["changed"] is False, "it reads only: a second run changes nothing either"
    assert result["node"]["metadata"]["name"] == NODE, "the Node as last read, for the steps after"
    assert [path for path, _query in server.paths] == ["/api/v1/nodes/gpu-01"] * 3


def test_at_the_timeout_it_says_which_part_is_missing():
    result = run(FakeApiServer(nodes=[node(branch="580")]), ["node_ready"], timeout=5)
    assert not result["ok"] and result["waited"] == 5.0
    assert result["message"] == ("After driver_upgrade_ready_timeout (5 s) the Node gpu-01 is Ready but its label "
                                 "nvidia.com/cuda.driver-version.major says 580, not 615 (is GPU Feature Discovery "
                                 "running on it?). The node stays cordoned.")
    gone = run(FakeApiServer(nodes=[None]), ["node_ready"], timeout=0)
    assert "is gone from the API server" in gone["message"] and gone["node"] == {}


def test_the_agents_pods_are_read_in_their_namespace_by_selector_and_node():
    server = FakeApiServer(pods=[[agent("mpsd-x")], []])
    result = run(server, ["agents_left"])
    assert result["ok"] and result["waited"] == 2.0
    path, query = server.paths[0]
    assert path == "/api/v1/namespaces/gpu-fractioning/pods"
    assert query == {"labelSelector": [SELECTOR], "fieldSelector": ["spec.nodeName=gpu-01"]}


def test_agents_that_do_not_leave_are_named_with_the_label_that_sends_them_off():
    result = run(FakeApiServer(pods=[[agent("mpsd-x")]]), ["agents_left"], timeout=4)
    assert not result["ok"]
    assert result["message"].startswith("1 fractioning agent pod(s) still on the node after "
                                        "driver_upgrade_agent_timeout (4 s): mpsd-x.")
    assert "nvidia.com/gpu-driver-upgrade-state label" in result["message"]


def test_agents_back_and_their_condition_are_waited_for_together():
    server = FakeApiServer(nodes=[node(condition="False"), node(condition="True")],
                           pods=[[agent("mpsd-x", ready=False), agent("fractiond-y")], [agent("mpsd-x"), agent("fractiond-y")]])
    result = run(server, ["agents_back", "agent_condition"], agents_expected=2)
    assert result["ok"] and result["waited"] == 2.0
    assert result["check_results"]["agents_back"]["rows"] == [{"pod": "mpsd-x", "ready": True}, {"pod": "fractiond-y", "ready": True}]
    assert result["check_results"]["agent_condition"]["ok"]


def test_one_read_counts_the_agents_on_the_node():
    result = run(FakeApiServer(pods=[[agent("mpsd-x"), agent("fractiond-y", ready=False)]]), ["agents_back"], timeout=0)
    assert result["ok"] and len(result["check_results"]["agents_back"]["rows"]) == 2 and result["waited"] == 0.0


def fraction(name):
    return {"metadata": {"name": name, "namespace": "team-a", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "main"}]}, "status": {"phase": "Running"}}


def test_it_waits_for_the_pods_that_hold_a_gpu_and_returns_the_nodes_pods():
    server = FakeApiServer(node_pods=[[fraction("half"), agent("mpsd-x")], [agent("mpsd-x")]])
    result = run(server, ["gpu_pods_gone"], timeout=60)
    assert result["ok"] and result["waited"] == 2.0
    assert [p["metadata"]["name"] for p in result["pods"]] == ["mpsd-x"], "for gpu_holders_info to name pods"
    assert server.paths[0] == ("/api/v1/pods", {"fieldSelector": ["spec.nodeName=gpu-01"]})


def test_a_pod_that_keeps_its_gpu_is_named_at_the_timeout():
    result = run(FakeApiServer(node_pods=[[fraction("half")]]), ["gpu_pods_gone"], timeout=6)
    assert not result["ok"]
    assert [row["name"] for row in result["check_results"]["gpu_pods_gone"]["rows"]] == ["half"]
    assert result["message"].startswith("1 still hold a GPU after driver_upgrade_holders_timeout (6 s), so the driver "
                                        "was not changed: half.")


def test_a_server_that_stops_answering_is_waited_for_then_named(monkeypatch):
    server = FakeApiServer(nodes=[503, node()])
    assert run(server, ["node_ready"])["ok"], "one unanswered read is waited past"

    monkeypatch.setattr(cluster_access, "api_client", lambda *args: FakeApiServer(nodes=[503]))
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)
    done = run_module(monkeypatch, module.main, {"node": NODE, "checks": ["node_ready"], "branch": "615", "timeout": 0})
    assert done.failed and done.result["failure"] == "cluster"
    assert done.result["msg"] == ("Waiting for node_ready on gpu-01: the API server did not answer the last read before "
                                  "the timeout (0 s): reading Node gpu-01: 503 Not Found")


@pytest.mark.parametrize("args, parameter", [
    ({"node": "GPU_01", "checks": ["node_ready"], "branch": "615"}, "node"),
    ({"node": NODE, "checks": [], "branch": "615"}, "checks"),
    ({"node": NODE, "checks": ["node_ready"]}, "branch"),
    ({"node": NODE, "checks": ["agents_back"], "agents_expected": -1}, "agents_expected"),
    ({"node": NODE, "checks": ["agents_left"], "agent_namespace": "GPU"}, "agent_namespace"),
    ({"node": NODE, "checks": ["agent_condition"], "condition": "not a/condition/"}, "condition"),
    ({"node": NODE, "checks": ["agents_left"], "timeout": -1}, "timeout"),
    ({"node": NODE, "checks": ["agents_left"], "poll_interval": 0}, "poll_interval"),
    ({"node": NODE, "checks": ["agents_left"], "agent_selector": "app=mpsd\n"}, "agent_selector"),
    ({"node": NODE, "checks": ["agents_left"], "state_label": "a label"}, "state_label"),
    ({"node": NODE, "checks": ["node_ready"], "branch": "615", "driver_label": "/driver"}, "driver_label"),
])
def test_bad_input_is_refused_before_the_cluster_is_asked(monkeypatch, args, parameter):
    monkeypatch.setattr(cluster_access, "api_client", pytest.fail)
    done = run_module(monkeypatch, module.main, args)
    assert done.failed and done.result["failure"] == "bad_input", done.result
    assert done.result["parameter"] == parameter


def test_a_check_it_does_not_know_is_refused_by_its_choices(monkeypatch):
    done = run_module(monkeypatch, module.main, {"node": NODE, "checks": ["node_gone"]})
    assert done.failed and "node_gone" in done.result["msg"]
    assert json.dumps(done.result)   # a plain result

# Apache-2.0
"""disruption_budgets_info: which API it reads budgets from, the calls it makes
(plain REST, as the kubernetes library 35 and later let it), its wait, and its
refusal of bad input (on a real API server: the fleet's driver rollout,
tests/integration/fleet/test_driver_upgrade.py)."""
import json
from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access
from ansible_collections.smshare.kai.plugins.modules import disruption_budgets_info as module

from module_runner import run_module

NODE = "gpu-01"


def pod(name, labels, node=NODE, phase="Running"):
    return {"metadata": {"name": name, "namespace": "team-a", "labels": labels,
                         "ownerReferences": [{"kind": "ReplicaSet", "name": name + "-rs"}]},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def budget(name, allowed):
    return {"metadata": {"name": name, "namespace": "team-a", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": allowed}}


class Response:
    def __init__(self, status, body):
        self.status, self.reason = status, "OK" if status == 200 else "Not Found"
        self.data, self.headers = json.dumps(body).encode(), {}

    def read(self):
        return self.data

    def getheaders(self):
        return {}


class FakeApiServer:
    """The ApiClient's two plain-call methods over a few paths; `served` the
    policy versions it serves; `allowed` what the budget allows at each read."""

    def __init__(self, served=("policy/v1",), allowed=(0,)):
        self.served, self.allowed, self.paths = served, list(allowed), []

    def param_serialize(self, method, resource_path, header_params, body, auth_settings):
        return method, "https://api" + resource_path, header_params, body, []

    def call_api(self, verb, url, header_params, body, post_params, _request_timeout):
        parts = urlsplit(url)
        self.paths.append((verb, parts.path, parse_qs(parts.query)))
        api = parts.path[len("/apis/"):].rsplit("/poddisruptionbudgets", 1)[0]
        if parts.path == "/api/v1/pods":
            return Response(200, {"kind": "PodList", "items": [pod("web-1", {"app": "web"})]})
        if api not in self.served:
            return Response(404, {"kind": "Status", "code": 404})
        if parts.path.endswith("/poddisruptionbudgets"):
            allowed = self.allowed.pop(0) if len(self.allowed) > 1 else self.allowed[0]
            return Response(200, {"kind": "PodDisruptionBudgetList", "apiVersion": api, "items": [budget("web", allowed)]})
        return Response(200, {"kind": "APIResourceList", "groupVersion": api,
                              "resources": [{"name": "poddisruptionbudgets", "kind": "PodDisruptionBudget"}]})


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def params(**overrides):
    return dict({"node": NODE, "pod_selectors": [], "force": False, "timeout": 0, "poll_interval": 5}, **overrides)


@pytest.mark.parametrize("served, api", [
    (("policy/v1", "policy/v1beta1"), "policy/v1"),
    (("policy/v1beta1",), "policy/v1beta1"),     # before Kubernetes 1.21
    ((), ""),                                     # no budgets served: nothing can block
])
def test_budgets_are_read_from_the_newest_api_served(served, api):
    server = FakeApiServer(served=served)
    result = module.run(params(), module.BudgetReads(server))
    assert result["api_version"] == api
    assert result["ok"] == (api == "")
    if api:
        # A list's items carry no apiVersion: the rules (an empty selector in v1beta1) need it.
        assert result["blocks"][0]["name"] == "web"


def test_a_blocking_budget_is_named_with_its_pods():
    result = module.run(params(), module.BudgetReads(FakeApiServer()))
    assert result["ok"] is False and result["waited"] == 0.0 and result["changed"] is False
    assert result["blocks"] == [{"namespace": "team-a", "name": "web", "allowed": 0, "pods": ["team-a/web-1"],
                                 "text": "PodDisruptionBudget team-a/web allows 0 disruption(s) now and draining "
                                         "gpu-01 would evict 1 of its pods (team-a/web-1)"}]
    assert result["message"] == result["blocks"][0]["text"]


def test_the_pods_are_read_by_node_and_selectors_in_one_call():
    server = FakeApiServer()
    module.run(params(pod_selectors=["app=web", "tier!=batch"]), module.BudgetReads(server))
    pods = [query for verb, path, query in server.paths if path == "/api/v1/pods"]
    assert pods == [{"fieldSelector": ["spec.nodeName=gpu-01"], "labelSelector": ["app=web,tier!=batch"]}]


def test_it_waits_for_the_budget_to_allow_the_drain_in_one_run():
    server, clock = FakeApiServer(allowed=(0, 0, 1)), Clock()
    result = module.run(params(timeout=60), module.BudgetReads(server), clock, clock.sleep)
    assert result["ok"] and result["blocks"] == [] and result["message"] == ""
    assert result["waited"] == 10.0
    assert sum(1 for _verb, path, _query in server.paths if path.endswith("poddisruptionbudgets")) == 3


def test_a_wait_ends_at_its_timeout_with_the_budget_named():
    server, clock = FakeApiServer(allowed=(0,)), Clock()
    result = module.run(params(timeout=12, poll_interval=5), module.BudgetReads(server), clock, clock.sleep)
    assert not result["ok"] and result["waited"] == 12.0
    assert "team-a/web allows 0" in result["message"]


def test_a_refused_read_is_a_cluster_failure(monkeypatch):
    class Refusing(FakeApiServer):
        def call_api(self, verb, url, header_params, body, post_params, _request_timeout):
            return Response(403, {"kind": "Status", "code": 403})

    monkeypatch.setattr(cluster_access, "api_client", lambda *args: Refusing())
    done = run_module(monkeypatch, module.main, {"node": NODE})
    assert done.failed and done.result["failure"] == "cluster"
    assert "reading the pods on gpu-01 or the PodDisruptionBudgets failed: 403" in done.result["msg"]


@pytest.mark.parametrize("args, parameter", [
    ({"node": "GPU_01"}, "node"),
    ({"node": NODE, "timeout": -1}, "timeout"),
    ({"node": NODE, "poll_interval": 0}, "poll_interval"),
    ({"node": NODE, "pod_selectors": ["app=web", " "]}, "pod_selectors"),
])
def test_bad_input_is_refused_before_the_cluster_is_asked(monkeypatch, args, parameter):
    monkeypatch.setattr(cluster_access, "api_client", pytest.fail)
    done = run_module(monkeypatch, module.main, args)
    assert done.failed and done.result["failure"] == "bad_input"
    assert done.result["parameter"] == parameter

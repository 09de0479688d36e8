# Apache-2.0
"""gpu_cluster_info: bad input is refused before the cluster is asked, and a kubeconfig
that cannot be read or a server that does not answer is an answer for each read
(the shapes preflight's rows read; the module on a real API server, a limited identity
included: the lab's preflight tests)."""
import pytest

from ansible_collections.smshare.kai.plugins.modules import gpu_cluster_info

from module_runner import run_module

UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("args, words", [
    ({"access": [{"resource": "Namespaces"}]}, "access[0].resource='Namespaces': must be a resource's plural name"),
    ({"access": [{"group": "apps"}]}, "access[0].resource"),
    ({"access": [{"resource": "deployments", "group": "Apps"}]}, "must be an API group"),
    ({"runtime_class": "NVIDIA"}, "must be a RuntimeClass name"),
    ({"gpu_node_selector": ""}, "gpu_node_selector"),
], ids=["resource-case", "resource-missing", "group-case", "runtime-class", "selector-empty"])
def test_bad_input_is_refused_before_the_cluster_is_asked(monkeypatch, args, words):
    done = run_module(monkeypatch, gpu_cluster_info.main, dict(args, kubeconfig="/nonexistent/kubeconfig"))
    assert done.failed and done.result["failure"] == "bad_input" and words in done.result["msg"], done.result


def test_a_kubeconfig_that_cannot_be_read_is_every_answer_not_a_failure(monkeypatch, tmp_path):
    item = {"resource": "*", "group": ""}
    done = run_module(monkeypatch, gpu_cluster_info.main,
                      {"kubeconfig": str(tmp_path / "none"), "access": [item], "runtime_class": "nvidia"})
    found = done.result
    assert not done.failed
    answers = [found["access"]["results"][0], found["runtime_class"], found["nodes"], found["all_nodes"]]
    answers += found["workloads"]["results"]
    assert all(a["msg"].startswith("cannot load kubeconfig %s" % (tmp_path / "none")) for a in answers), found
    assert found["access"]["results"][0]["item"] == item


def test_a_server_that_does_not_answer_fails_each_read_in_its_own_shape(monkeypatch, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(UNREACHABLE)
    item = {"resource": "namespaces", "group": ""}
    done = run_module(monkeypatch, gpu_cluster_info.main,
                      {"kubeconfig": str(config), "access": [item], "runtime_class": "nvidia"})
    found = done.result
    assert not done.failed and found["changed"] is False
    [answer] = found["access"]["results"]
    assert answer["item"] == item and answer["msg"].startswith("the review failed: ") and "result" not in answer
    assert found["runtime_class"]["msg"].startswith("reading RuntimeClass nvidia failed: ")
    for key in ("nodes", "all_nodes"):
        assert set(found[key]) == {"msg"} and found[key]["msg"].startswith("listing failed: ")
    assert [r["item"] for r in found["workloads"]["results"]] == ["Deployment", "DaemonSet"]
    assert all(r["msg"].startswith("listing failed: ") for r in found["workloads"]["results"])

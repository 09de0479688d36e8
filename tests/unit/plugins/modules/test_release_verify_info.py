# Apache-2.0
"""release_verify_info: bad input is refused before the cluster is asked, and a
kubeconfig that cannot be read is named (its checks: test_release_verify.py; the
module on a real API server: the lab's kai_scheduler and gpu_fractioning tests)."""
import pytest

from ansible_collections.smshare.kai.plugins.modules import release_verify_info

from module_runner import run_module

NEEDED = {"chart": "gpu-fractioning", "image_base": "registry.example.com:5000/kai-gpu-fractioning", "tag": "smshare-44d1d0a-af0544e"}


@pytest.mark.parametrize("args, words", [
    ({"timeout": 0}, "timeout=0: must be 1 or more"),
    ({"poll_interval": -5}, "poll_interval=-5: must be 1 or more"),
    ({"failure_log_lines": 0}, "failure_log_lines=0: must be 1 or more"),
    ({"namespace": "GPU_fractioning"}, "must be a namespace name"),
    ({"tag": ""}, "tag="),
    ({"tag": "v1 beta"}, "must be an image tag"),
    ({"image_base": " "}, "must be a repository prefix"),
    ({"image_base": "registry.example.com/kai-gpu-fractioning/"}, "must be a repository prefix"),
    ({"components": []}, "must list at least 1 item"),
    ({"default_namespace_percentage": 0}, "must be a percentage above 0, at most 100"),
    ({"default_namespace_percentage": 150}, "must be a percentage above 0, at most 100"),
    ({"release_name": "GPU"}, "must be a helm release name"),
    ({"components": ["mpsd", "Frac tiond"]}, "components[1]='Frac tiond': must be a label value"),
    ({"cri_socket_path": "/run/containerd.sock\n"}, "must not contain control characters"),
    ({"nri_socket_path": ""}, "nri_socket_path="),
    ({"mps_control_log": "control.log"}, "mps_control_log='control.log': must be an absolute path"),
    ({"mps_control_log": "/var/log/../control.log"}, "must be a normalised absolute path"),
    ({"image_manifest_path": "/tmp/m.json\r"}, "must not contain control characters"),
    ({"node_selector": "a=b\nc=d"}, "must not contain control characters"),
    ({"gpu_sharing_mode": ""}, "gpu_sharing_mode="),
    ({"mps_start_pattern": "Starting (control"}, "must be a regular expression (missing ), unterminated subpattern"),
    ({"deployments_hint": "see\x1b[31m"}, "must not contain control characters"),
    ({"mpsd_memory_limit": "1Gi\n"}, "must not contain control characters"),
], ids=["timeout", "poll", "log-lines", "namespace", "tag", "tag-space", "image-base",
        "image-base-slash", "components", "percent-zero",
        "percent-over", "release", "component", "cri-newline", "nri-empty", "mps-log-relative",
        "mps-log-dotdot", "manifest-return", "selector-newline", "sharing-empty", "pattern", "hint-escape", "mpsd-newline"])
def test_bad_input_is_refused_before_the_cluster_is_asked(monkeypatch, args, words):
    done = run_module(monkeypatch, release_verify_info.main,
                      dict(NEEDED, kubeconfig="/nonexistent/kubeconfig", **args))
    assert done.failed and done.result["failure"] == "bad_input" and words in done.result["msg"], done.result


def test_a_chart_it_does_not_know_is_refused(monkeypatch):
    done = run_module(monkeypatch, release_verify_info.main, dict(NEEDED, chart="kai"))
    assert done.failed and "value of chart must be one of: kai-scheduler, gpu-fractioning" in done.result["msg"]


def test_a_kubeconfig_that_cannot_be_read_is_a_cluster_failure(monkeypatch, tmp_path):
    done = run_module(monkeypatch, release_verify_info.main, dict(NEEDED, kubeconfig=str(tmp_path / "none")))
    assert done.failed and done.result["failure"] == "cluster" and "cannot load kubeconfig" in done.result["msg"]


def test_an_api_server_that_does_not_answer_is_named(monkeypatch, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    done = run_module(monkeypatch, release_verify_info.main, dict(NEEDED, kubeconfig=str(config)))
    assert done.failed and done.result["failure"] == "cluster", done.result
    assert done.result["msg"].startswith("The last read of the cluster failed: discovery at https://127.0.0.1:1")


class Missing(object):
    """A discovery that serves no such kind, as DynamicClient's."""

    def get(self, **kwargs):
        raise release_verify_info.ResourceNotFoundError("No matches found for %s" % kwargs)


def test_a_kind_no_api_serves_reads_as_no_object_so_the_check_names_what_is_missing():
    reader = object.__new__(release_verify_info.ClusterReader)
    reader.client = type("Client", (), {"resources": Missing()})()
    assert reader.list("kai.scheduler/v1", "Config", name="kai-config") == []

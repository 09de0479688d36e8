# Apache-2.0
"""fraction_smoke_test run in-process against a fake API (the class Cluster
replaced): bad input, check mode, the happy path, a failing check, a pod that
stays Pending, an interruption and leftovers of a killed run. Every path ends
with no test pod left. The real API, exec and logs: tests/integration/cluster/test_smoke_on_lab.py."""
import json
import os
import signal
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import gpu_probe
from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as st
from ansible_collections.smshare.kai.plugins.modules import fraction_smoke_test as mod
from module_runner import run_module

HERE = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "smoke_checks")
GPU = "GPU-5f2a6c7e-0a1b-4c3d-8e9f-000000000003"


def fixture(name):
    with open(os.path.join(HERE, name)) as handle:
        return handle.read()


class FakeCluster(object):
    """Pods are bound at once by a binder that behaves (unless told otherwise)."""

    def __init__(self, behaviour=None, leftovers=()):
        self.behaviour = behaviour or {}
        self.pods_by_name = {}
        self.created, self.deleted_names, self.execs = [], [], []
        self.reads = 0
        for name in leftovers:
            pod = st.pod_manifest(name, "default", "default-queue", 0.5, "img", run="any")
            self.pods_by_name[name] = pod

    # -- what the module calls
    def pods(self, namespace, selector=None, field=None):
        if namespace == "gpu-fractioning":
            return [{"metadata": {"name": "gpu-fractioning-mpsd-x1"}, "spec": {"nodeName": "gpu-node-07"}}]
        if namespace != "default":
            return []
        return [p for p in self.pods_by_name.values() if (p["metadata"]["labels"] or {}).get(st.RUN_LABEL)]

    def pod(self, namespace, name):
        self.reads += 1
        if self.behaviour.get("interrupt_on_read") and self.reads == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.behaviour.get("interrupt_twice") and self.reads == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.behaviour.get("deleted_by_someone_else") and self.reads == 3:
            self.pods_by_name.pop(name, None)
        return self.pods_by_name.get(name)

    def create(self, manifest):
        pod = dict(manifest, metadata=dict(manifest["metadata"], uid="uid-" + manifest["metadata"]["name"],
                                           annotations=dict(manifest["metadata"]["annotations"])))
        pod["spec"] = dict(manifest["spec"])
        self.created.append(pod["metadata"]["name"])
        self.pods_by_name[pod["metadata"]["name"]] = pod
        if self.behaviour.get("pending"):
            pod["status"] = {"phase": "Pending"}
            return
        notes = pod["metadata"]["annotations"]
        notes[st.annotation("main", st.PORTION)] = "0.5"
        # the binder: (40960 MiB - the 1Gi reserve) x 0.5
        notes[st.annotation("main", st.MEMORY_REQUEST)] = "19968Mi"
        notes[st.annotation("main", st.DEVICES)] = GPU
        pod["spec"]["nodeName"] = "gpu-node-07"
        dq = pod["metadata"]["name"].startswith(st.DEVICEQUERY_POD)
        cid = "%064x" % (len(self.created) * 7919)
        pod["status"] = {"phase": "Succeeded" if dq else "Running",
                         "conditions": [{"type": "Ready", "status": "False" if dq else "True"}],
                         "containerStatuses": [{"name": "main", "containerID": "containerd://" + cid,
                                                "state": {"terminated": {}} if dq else {"running": {}}}]}

    def delete(self, namespace, name):
        if self.behaviour.get("interrupt_twice"):
            # ansible's worker forwards the signal to its process group: a second one, mid-cleanup
            os.kill(os.getpid(), signal.SIGTERM)
        if name in self.behaviour.get("refuse_delete", ()):
            self.behaviour["refuse_delete"] = ()
            raise st.SmokeError("deleting pod default/%s: 500 Internal Server Error" % name, "cluster")
        if self.pods_by_name.pop(name, None) is None:
            return False
        self.deleted_names.append(name)
        return True

    def events(self, namespace, name=None):
        return []

    def nodes(self):
        return [{"metadata": {"name": "gpu-node-07"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}]

    def node(self, name):
        return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                                      "nvidia.com/gpu.memory": "40960"}}}

    def custom_list(self, group, version, plural, namespace=None):
        if plural == "queues":
            return [{"metadata": {"name": "default-queue"}, "spec": {}}]
        return []

    def runtime_classes(self):
        return ["nvidia"]

    def exec_(self, namespace, name, command, container=None, timeout=60):
        self.execs.append((namespace, name, command))
        if command[0] == "nvidia-cuda-mps-control" and self.behaviour.get("mps_hangs"):
            return "NAMESPACE  ACTIVE", "still running after 60 s", None
        if command[0] == "nvidia-cuda-mps-control":
            rows = "".join("%s  50.00  unlimited\n" % st.namespace_name_of(p) for p in self.pods_by_name.values()
                           if st.namespace_name_of(p))
            return "NAMESPACE  ACTIVE_THREAD_PERCENTAGE  PINNED_DEVICE_MEM_LIMIT\ndefault  10.00  unlimited\n" + rows, \
                "", 0
        if command == ["env"]:
            return ("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps\nCUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50\n"
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=19968M\n"
                    "NVIDIA_GPU_MEMORY_REQUEST=19968\nNVIDIA_GPU_MEMORY_LIMIT=19968\nNVIDIA_VISIBLE_DEVICES=%s\n"
                    % GPU), "", 0
        if "nvidia-smi" in command:
            return ("40960 MiB\n" if self.behaviour.get("uncapped") else "19968 MiB\n"), "", 0
        if command[:2] == ["python3", "-c"] and command[3:] == ["--role", "neighbour"]:
            assert command[2] == st.PROBE_SOURCE and name.startswith("fraction-neighbour")
            assert any(p.startswith("fraction-greedy") for p in self.pods_by_name), "exec'd beside the greedy pod"
            return probe_line("neighbour"), "", 0
        raise AssertionError("unexpected exec %r" % command)

    def logs(self, namespace, name, container=None):
        if name.startswith("fraction-greedy"):
            return "" if self.behaviour.get("silent") else probe_line("greedy", self.behaviour.get("uncapped"))
        return fixture("devicequery-a100-half.txt")


def probe_line(role, uncapped=False):
    """What the probe prints on the fake A100-40GB (19968 MiB caps)."""
    allocations = [{"what": "within", "mib": 15974, "ok": True, "code": 0, "result": "CUDA_SUCCESS"}]
    if role == "greedy":
        allocations.append({"what": "beyond", "mib": 22464, "ok": bool(uncapped), "code": 0 if uncapped else 2,
                            "result": "CUDA_SUCCESS" if uncapped else "CUDA_ERROR_OUT_OF_MEMORY"})
    return "%s %s\n" % (gpu_probe.MARKER, json.dumps({
        "role": role, "cap_mib": 19968, "cap_from": "NVIDIA_GPU_MEMORY_LIMIT", "device": "NVIDIA A100-SXM4-40GB",
        "multiprocessors": 54, "total_memory_mib": 40960, "error": None, "allocations": allocations,
        "held_mib": sum(a["mib"] for a in allocations if a["ok"])}))


def run(monkeypatch, args, cluster=None):
    monkeypatch.setattr(mod, "POLL", 0.01)

    def no_cluster(*_args):
        raise AssertionError("the module reached the API before its input was checked")

    monkeypatch.setattr(mod, "Cluster", (lambda *_a: cluster) if cluster is not None else no_cluster)
    return run_module(monkeypatch, mod.main, args)


BAD = [
    ("fraction_one", {"fraction": 1.0}, "fraction", "at most 0.5"),
    ("fraction_zero", {"fraction": 0.0}, "fraction", "greater than 0"),
    ("namespace_upper", {"namespace": "Default"}, "namespace", "namespace name"),
    ("namespace_newline", {"namespace": "default\n"}, "namespace", "control characters"),
    ("node_space", {"node": "gpu node"}, "node", "node name"),
    ("queue_slash", {"queue": "a/b"}, "queue", "queue name"),
    ("image_space", {"image": "nvidia/cuda latest"}, "image", "image reference"),
    ("image_dash", {"devicequery_image": "-it"}, "devicequery_image", "image reference"),
    ("image_arguments", {"image": "nvidia/cuda:13 --privileged"}, "image", "image reference"),
    ("image_credentials", {"image": "alice:s3cret@reg.example.com/cuda:13"}, "image", "credentials"),
    ("image_url_credentials", {"image": "https://alice:s3cret@reg.example.com/cuda:13"}, "image", "credentials"),
    ("image_scheme", {"image": "https://reg.example.com/cuda:13"}, "image", "image reference"),
    ("image_upper", {"image": "reg.example.com/Team/cuda:13"}, "image", "image reference"),
    ("image_port", {"devicequery_image": "reg.example.com:99999/dq:1"}, "devicequery_image", "image reference"),
    ("secret_upper", {"image_pull_secrets": ["Login"]}, "image_pull_secrets[0]", "Secret name"),
    ("selector_space", {"mpsd_selector": "app in (a, b)"}, "mpsd_selector", "label selector"),
    ("timeout_small", {"timeout": 1}, "timeout", "between 10 and 3600"),
    ("sm_count", {"gpu_sm_count": 0}, "gpu_sm_count", "between 1 and 1024"),
    ("report_relative", {"report_junit": "out/smoke.xml"}, "report_junit", "absolute path"),
    # Found before the cluster is read, not as a warning once the pods ran.
    ("report_folder", {"report_junit": "/tmp"}, "report_junit", "is a folder"),
    ("report_under_a_file", {"report_markdown": "/etc/hostname/smoke.md"}, "report_markdown", "is not a folder"),
    ("report_device", {"report_markdown": "/dev/null"}, "report_markdown", "not a regular file"),
    ("suffix_dot", {"name_suffix": "a.b"}, "name_suffix", "lower-case"),
    ("tolerate_without_node", {"tolerate_unschedulable": True}, "tolerate_unschedulable", "needs node"),
    ("reserved_negative", {"reserved_gpu_memory_mib": -1}, "reserved_gpu_memory_mib", "between 0 and 65536"),
    ("default_pct_zero", {"mps_default_percentage": 0}, "mps_default_percentage", "between 1 and 100"),
    ("greedy_image_space", {"greedy_image": "python 3"}, "greedy_image", "image reference"),
]


@pytest.mark.parametrize("args, parameter, words", [pytest.param(a, p, w, id=i) for i, a, p, w in BAD])
@pytest.mark.parametrize("check_mode", [False, True])
def test_bad_input(monkeypatch, args, parameter, words, check_mode):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    done = run(monkeypatch, args)
    assert done.failed
    assert done.result["failure"] == "bad_input" and done.result["parameter"] == parameter
    assert words in done.result["msg"] and "Nothing was changed" in done.result["msg"]
    assert "s3cret" not in str(done.result)


def test_check_mode_creates_nothing(monkeypatch):
    cluster = FakeCluster(leftovers=["fraction-smoke-a"])
    done = run(monkeypatch, {"_ansible_check_mode": True, "node": "gpu-node-07"}, cluster)
    assert not done.failed
    assert [p["metadata"]["name"] for p in done.result["would_create"]] == [
        "fraction-smoke-a-gpu-node-07", "fraction-smoke-b-gpu-node-07", "fraction-devicequery-gpu-node-07"]
    assert done.result["changed"] is True and done.result["would_delete"] == ["fraction-smoke-a"]
    assert cluster.created == [] and cluster.deleted_names == [] and cluster.execs == []


def test_happy_path_reports_and_cleans_up(monkeypatch, tmp_path):
    cluster = FakeCluster()
    md, xml = str(tmp_path / "r" / "smoke.md"), str(tmp_path / "smoke.xml")
    done = run(monkeypatch, {"report_markdown": md, "report_junit": xml}, cluster)
    assert not done.failed, done.result.get("msg")
    result = done.result
    assert result["passed"] and result["changed"] is False and result["node"] == "gpu-node-07"
    assert [c["check"] for c in result["checks"]] == list(st.CHECKS)
    # the guide's order: the pair, its checks and its deletion, then deviceQuery
    assert result["deleted"] == cluster.created == ["fraction-smoke-a", "fraction-smoke-b", "fraction-devicequery"]
    assert cluster.pods_by_name == {}
    mps_exec = [e for e in cluster.execs if e[0] == "gpu-fractioning"][0]
    assert mps_exec[2] == ["nvidia-cuda-mps-control", "-p", "3", "namespace", "list", "--server=shared"]
    hostile = [e for e in cluster.execs if "nvidia-smi" in e[2]][0][2]
    assert hostile[:2] == ["env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"]
    assert any("54" in line for line in result["table"])
    assert result["reports"] == [md, xml]
    assert ET.parse(xml).getroot().find("testsuite").get("failures") == "0"
    assert "passed" in open(md).read()


def test_failing_check_names_node_gpu_and_check(monkeypatch):
    cluster = FakeCluster({"uncapped": True})
    done = run(monkeypatch, {"measure_sm_share": False}, cluster)
    assert done.failed and done.result["failure"] == "checks_failed"
    assert "node gpu-node-07" in done.result["msg"] and "check memory (GPU %s)" % GPU in done.result["msg"]
    assert [c["check"] for c in done.result["checks"] if not c["passed"]] == ["memory"]
    assert cluster.pods_by_name == {}


def test_an_mps_namespace_list_that_does_not_end_fails_the_mps_check_naming_it(monkeypatch):
    cluster = FakeCluster({"mps_hangs": True})
    done = run(monkeypatch, {"measure_sm_share": False}, cluster)
    assert done.failed and done.result["failure"] == "checks_failed"
    mps = [c for c in done.result["checks"] if c["check"] == "mps"]
    assert mps and not mps[0]["passed"], done.result["checks"]
    assert "namespace list --server=" in mps[0]["message"] and "did not end: still running after 60 s" in mps[0]["message"]
    assert cluster.pods_by_name == {}


def test_pending_is_diagnosed_and_cleaned_up(monkeypatch, tmp_path):
    cluster = FakeCluster({"pending": True})
    xml = str(tmp_path / "smoke.xml")
    done = run(monkeypatch, {"queue": "nope", "settle": 1, "timeout": 10, "report_junit": xml}, cluster)
    assert done.failed and done.result["failure"] == "pending"
    assert "queue_unknown" in done.result["msg"]
    assert {p["pod"] for p in done.result["pending"]} == {"fraction-smoke-a", "fraction-smoke-b"}
    assert "fraction-devicequery" not in cluster.created
    assert cluster.pods_by_name == {}
    assert ET.parse(xml).getroot().find("testsuite").get("failures") == "5"


def test_interruption_deletes_the_pods(monkeypatch):
    cluster = FakeCluster({"pending": True, "interrupt_on_read": True})
    previous = signal.getsignal(signal.SIGTERM)
    done = run(monkeypatch, {"timeout": 30}, cluster)
    assert done.failed and done.result["failure"] == "interrupted"
    assert "the test pods were deleted" in done.result["msg"]
    assert cluster.pods_by_name == {} and sorted(cluster.deleted_names) == ["fraction-smoke-a", "fraction-smoke-b"]
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_second_signal_during_the_cleanup_does_not_stop_it(monkeypatch):
    cluster = FakeCluster({"pending": True, "interrupt_twice": True})
    previous = signal.getsignal(signal.SIGTERM)
    done = run(monkeypatch, {"timeout": 30}, cluster)
    assert done.failed and done.result["failure"] == "interrupted", done.result
    assert cluster.pods_by_name == {}
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_refused_delete_does_not_leave_the_other_pod(monkeypatch):
    cluster = FakeCluster({"pending": True, "interrupt_on_read": True, "refuse_delete": ["fraction-smoke-a"]})
    done = run(monkeypatch, {"timeout": 30}, cluster)
    assert done.failed
    assert "fraction-smoke-b" in cluster.deleted_names


def test_a_pod_deleted_by_someone_else_is_named(monkeypatch):
    cluster = FakeCluster({"pending": True, "deleted_by_someone_else": True})
    done = run(monkeypatch, {"timeout": 30}, cluster)
    assert done.failed and done.result["failure"] == "pods_deleted"
    assert "fraction-smoke-a deleted while the smoke test waited for it" in done.result["msg"]
    assert cluster.pods_by_name == {}


def test_leftovers_of_a_killed_run_go_first(monkeypatch):
    cluster = FakeCluster(leftovers=["fraction-smoke-a", "fraction-devicequery"])
    done = run(monkeypatch, {}, cluster)
    assert not done.failed, done.result.get("msg")
    assert done.result["changed"] is True
    assert cluster.deleted_names[:2] == ["fraction-smoke-a", "fraction-devicequery"]
    assert cluster.pods_by_name == {}


def test_the_greedy_neighbour_runs_last_beside_a_pod_that_keeps_to_its_share(monkeypatch, tmp_path):
    cluster = FakeCluster()
    xml = str(tmp_path / "smoke.xml")
    done = run(monkeypatch, {"greedy_neighbour": True, "report_junit": xml}, cluster)
    assert not done.failed, done.result.get("msg")
    assert [c["check"] for c in done.result["checks"]] == list(st.CHECKS) + ["greedy"]
    greedy = done.result["checks"][-1]
    assert greedy["passed"] and "refused 22464 MiB (CUDA_ERROR_OUT_OF_MEMORY)" in greedy["message"]
    # deviceQuery gave the GPU back before the pair was created
    assert cluster.created == ["fraction-smoke-a", "fraction-smoke-b", "fraction-devicequery", "fraction-greedy",
                               "fraction-neighbour"]
    assert cluster.deleted_names.index("fraction-devicequery") < len(cluster.deleted_names) - 2
    assert cluster.pods_by_name == {}
    assert any("fraction-greedy" in line and "15974" in line for line in done.result["table"])
    assert ET.parse(xml).getroot().find("testsuite").get("tests") == "6"


def test_a_greedy_neighbour_that_takes_more_memory_fails_naming_the_enforcement(monkeypatch):
    cluster = FakeCluster({"uncapped": True})
    done = run(monkeypatch, {"greedy_neighbour": True, "measure_sm_share": False}, cluster)
    assert done.failed and done.result["failure"] == "checks_failed"
    assert [c["check"] for c in done.result["checks"] if not c["passed"]] == ["memory", "greedy"]
    assert "check greedy (GPU %s): GPU memory cap not enforced" % GPU in done.result["msg"]
    assert cluster.pods_by_name == {}


def test_a_greedy_probe_that_prints_nothing_is_named(monkeypatch):
    cluster = FakeCluster({"silent": True})
    done = run(monkeypatch, {"greedy_neighbour": True, "measure_sm_share": False, "timeout": 10, "settle": 1},
               cluster)
    assert done.failed and done.result["failure"] == "pending"
    assert "probe_silent" in done.result["msg"] and "printed no result in 10s" in done.result["msg"]
    assert cluster.pods_by_name == {}


def test_check_mode_predicts_the_greedy_pods(monkeypatch):
    cluster = FakeCluster()
    done = run(monkeypatch, {"_ansible_check_mode": True, "greedy_neighbour": True, "measure_sm_share": False},
               cluster)
    assert [p["metadata"]["name"] for p in done.result["would_create"]] == [
        "fraction-smoke-a", "fraction-smoke-b", "fraction-greedy", "fraction-neighbour"]
    assert done.result["would_create"][2]["spec"]["containers"][0]["image"] == st.DEFAULT_GREEDY_IMAGE
    assert cluster.created == []


@pytest.mark.parametrize("raised, expected", [
    (None, ("4096 MiB\n", "", 0)),
    # A probe that does not end is its check's result (rc None, what it wrote, why), not a lost cluster.
    (mod.cluster_access.ExecTimeout("still running after 60 s", "half\n", "", started=True),
     ("half\n", "still running after 60 s", None)),
])
def test_exec_answers_with_the_commands_output(monkeypatch, raised, expected):
    def exec_in_pod(core, namespace, pod, command, container=None, timeout=30):
        assert (namespace, pod, container, timeout) == ("ns", "p", "c", 60)
        if raised:
            raise raised
        return "4096 MiB\n", "", 0
    monkeypatch.setattr(mod.cluster_access, "exec_in_pod", exec_in_pod)
    cluster = mod.Cluster.__new__(mod.Cluster)
    cluster.core = object()
    assert cluster.exec_("ns", "p", ["nvidia-smi"], "c") == expected


@pytest.mark.parametrize("raised, words", [
    (mod.cluster_access.ExecTimeout("no answer to the exec within 60 s"), "no answer to the exec within 60 s"),
    (OSError("connection refused"), "connection refused"),
])
def test_an_exec_without_an_answer_is_a_cluster_failure_with_the_command_shortened(monkeypatch, raised, words):
    def exec_in_pod(*args, **kwargs):
        raise raised
    monkeypatch.setattr(mod.cluster_access, "exec_in_pod", exec_in_pod)
    cluster = mod.Cluster.__new__(mod.Cluster)
    cluster.core = object()
    with pytest.raises(st.SmokeError) as caught:
        cluster.exec_("ns", "p", ["python3", "-c", "x" * 500])
    assert caught.value.failure == "cluster"
    assert str(caught.value).startswith("exec python3 -c xxx") and str(caught.value).endswith(words)
    assert "x" * 200 not in str(caught.value)


class PodCalls(object):
    """read/delete_namespaced_pod answering as told: a pod, or raising."""

    def __init__(self, raised=None):
        self.raised = raised

    def _answer(self, name, namespace, **_kwargs):
        if self.raised:
            raise self.raised
        return {"metadata": {"name": name, "namespace": namespace}}

    read_namespaced_pod = delete_namespaced_pod = _answer


def cluster_with(raised=None):
    cluster = mod.Cluster.__new__(mod.Cluster)
    cluster.core = PodCalls(raised)
    cluster.api = type("Serializer", (), {"sanitize_for_serialization": staticmethod(lambda obj: obj)})()
    return cluster


def test_a_pod_that_is_not_there_reads_as_none_and_deletes_as_gone_already():
    missing = mod.ApiException(status=404, reason="Not Found")
    assert cluster_with(missing).pod("ns", "a") is None
    assert cluster_with(missing).delete("ns", "a") is False
    assert cluster_with().pod("ns", "a") == {"metadata": {"name": "a", "namespace": "ns"}}
    assert cluster_with().delete("ns", "a") is True


@pytest.mark.parametrize("raised, words", [
    (mod.ApiException(status=500, reason="Internal Server Error"), "500 Internal Server Error"),
    (OSError("connection refused"), "connection refused"),
])
def test_any_other_failure_to_read_or_delete_a_pod_is_a_cluster_failure_naming_it(raised, words):
    for call, what in (("pod", "reading pod ns/a: "), ("delete", "deleting pod ns/a: ")):
        with pytest.raises(st.SmokeError) as caught:
            getattr(cluster_with(raised), call)("ns", "a")
        assert caught.value.failure == "cluster"
        assert str(caught.value) == what + words

# Apache-2.0
"""The smoke test's pure part: pods, parsers (on the fixtures under
fixtures/smoke_checks/, README there), the four checks and the SM share, every
"why pending" cause, and the reports."""
import copy
import os
import re
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as st

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "smoke_checks")
GPU = "GPU-5f2a6c7e-0a1b-4c3d-8e9f-000000000003"
OTHER_GPU = "GPU-5f2a6c7e-0a1b-4c3d-8e9f-000000000004"
UIDS = {"fraction-smoke-a": "0f6b1f3e-1111-4a2b-9c3d-aaaaaaaaaaaa",
        "fraction-smoke-b": "7c2d9e4f-2222-4b3c-8d4e-bbbbbbbbbbbb"}
# The runtime's container IDs; their MPS namespaces (fixtures/smoke_checks/mps-namespace-list.txt) are
# named from them as the fork's mpsd names them.
CIDS = {"fraction-smoke-a": "4f1c9e2b7d3a5c60918e2f4b6a7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8",
        "fraction-smoke-b": "9a8b7c6d5e4f30211203f4e5d6c7b8a9f0e1d2c3b4a59687f6e5d4c3b2a19080"}
NAMESPACES = {"fraction-smoke-a": "kai_4f1c9e2b7d3a5c60_9ba9ffdfec128f30f9db",
              "fraction-smoke-b": "kai_9a8b7c6d5e4f3021_37011f7a2bfefd159567"}
# An A100-SXM4-40GB: nvidia.com/gpu.memory 40960, the guide's (40960 - 1024) x 0.5 = 19968 MiB.
GPU_MEMORY = 40960
HALF = 19968


def fixture(name):
    with open(os.path.join(HERE, name)) as handle:
        return handle.read()


def bound(name, gpu=GPU, portion="0.5", memory="19968Mi", node="gpu-node-07"):
    """A smoke pod as it reads after KAI's binder placed it and its container started."""
    pod = st.pod_manifest(name, "default", "default-queue", 0.5, st.DEFAULT_IMAGE)
    pod["metadata"]["uid"] = UIDS.get(name, "uid-" + name)
    pod["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "main", "containerID": "containerd://" + CIDS.get(name, "%064x" % abs(hash(name)))}]}
    notes = pod["metadata"]["annotations"]
    if portion is not None:
        notes[st.annotation("main", st.PORTION)] = portion
    if memory is not None:
        notes[st.annotation("main", st.MEMORY_REQUEST)] = memory
        notes[st.annotation("main", st.MEMORY_LIMIT)] = memory
    if gpu is not None:
        notes[st.annotation("main", st.DEVICES)] = gpu
    pod["metadata"]["labels"][st.GPU_GROUP_LABEL] = "group-1"
    pod["spec"]["nodeName"] = node
    return pod


def good_env(gpu=GPU, pct="50", memory="19968", pipe="/tmp/nvidia-mps", pinned="0=19968M", plural=False):
    """What fractiond injects (gpu-fractioning injection.go names; plural: kai-gpu-fractioning @ 0ee10b42)."""
    tail = "S" if plural else ""
    return {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": pct,
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": pinned, "NVIDIA_GPU_MEMORY_REQUEST" + tail: memory,
            "NVIDIA_GPU_MEMORY_LIMIT" + tail: memory, "NVIDIA_VISIBLE_DEVICES": gpu}


# ---------------------------------------------------------------- the pods
def test_pod_manifest_is_the_guides():
    pod = st.pod_manifest("fraction-smoke-a", "default", "default-queue", 0.5, st.DEFAULT_IMAGE,
                          command=["sleep", "3600"])
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    assert pod["metadata"]["annotations"] == {"gpu-fraction": "0.5",
                                              "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}
    spec = pod["spec"]
    assert spec["schedulerName"] == "kai-scheduler" and spec["runtimeClassName"] == "nvidia"
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000}
    main = spec["containers"][0]
    assert main["name"] == "main" and main["image"] == "nvidia/cuda:13.3.1-base-ubuntu24.04"
    assert main["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert "nodeSelector" not in spec and "imagePullSecrets" not in spec


def test_manifests_per_node_with_overrides():
    params = {"namespace": "smoke", "queue": "team-a", "fraction": 0.25, "node": "gpu-node-07",
              "name_suffix": "gpu-node-07", "image": "reg/cuda:1", "devicequery_image": "reg/dq:1",
              "image_pull_secrets": ["login"], "image_pull_policy": "IfNotPresent", "runtime_class": "nvidia",
              "scheduler_name": "kai-scheduler", "measure_sm_share": True}
    pods, dq = st.manifests(params, st.run_key("gpu-node-07"))
    assert [p["metadata"]["name"] for p in pods] == ["fraction-smoke-a-gpu-node-07", "fraction-smoke-b-gpu-node-07"]
    assert dq["metadata"]["name"] == "fraction-devicequery-gpu-node-07"
    for pod in pods + [dq]:
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-07"}
        assert pod["spec"]["imagePullSecrets"] == [{"name": "login"}]
        assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.25"
        assert pod["metadata"]["labels"][st.RUN_LABEL] == "gpu-node-07"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert dq["spec"]["containers"][0]["env"] == [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "100"}]
    assert "command" not in dq["spec"]["containers"][0]
    assert pods[0]["spec"]["containers"][0]["command"] == ["sleep", "3600"]
    params["measure_sm_share"] = False
    assert st.manifests(params, "x")[1] is None


def test_tolerating_the_cordon_is_asked_for_per_run():
    params = {"namespace": "default", "queue": "default-queue", "fraction": 0.5, "node": "gpu-node-07",
              "image": "reg/cuda:1", "devicequery_image": "reg/dq:1", "tolerate_unschedulable": True}
    pods, dq = st.manifests(params, st.run_key("gpu-node-07"))
    for pod in pods + [dq]:
        assert pod["spec"]["tolerations"] == [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                               "effect": "NoSchedule"}]
    params["tolerate_unschedulable"] = False
    assert all("tolerations" not in p["spec"] for p in st.manifests(params, "x")[0])


def test_queue_label_left_off_when_empty():
    assert st.QUEUE_LABEL not in st.pod_manifest("p", "default", "", 0.5, "i")["metadata"]["labels"]


# ---------------------------------------------------------------- parsers
@pytest.mark.parametrize("text, mib", [("20Gi", 20480), ("20480Mi", 20480), ("21474836480", 20480),
                                       ("40G", 38146), ("0.5Gi", 512)])
def test_quantity_mib(text, mib):
    assert st.quantity_mib(text) == mib


@pytest.mark.parametrize("bad", ["", "20 Gi", "lots", "-1Gi", "20GB"])
def test_quantity_mib_refuses(bad):
    with pytest.raises(ValueError):
        st.quantity_mib(bad)


@pytest.mark.parametrize("portion, pct", [(0.5, 50), (0.25, 25), (1, 100), (0.001, 1), (0.333, 33), (0.29, 29)])
def test_expected_percentage(portion, pct):
    assert st.expected_percentage(portion) == pct


@pytest.mark.parametrize("portion, accepted", [(0.5, [50]), (0.336, [33, 34]), (0.125, [12, 13]), (0.001, [1])])
def test_rounding_either_way_is_accepted(portion, accepted):
    """The newest fractiond floors, db0ba2ec rounds; the pinned commit's choice is in no source."""
    assert st.accepted_percentages(portion) == accepted


def test_parse_env_recorded():
    env = st.parse_env(fixture("env-smoke-a.txt"))
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPU
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=19968M"
    assert st.parse_env("MULTI=one\ntwo lines\nB=2\n") == {"MULTI": "one", "B": "2"}


def test_parse_smi_memory():
    assert st.parse_smi_memory(fixture("smi-memory-half.txt")) == [19968]
    assert st.parse_smi_memory("40960 MiB\n40960 MiB\n") == [40960, 40960]
    for bad in ("", "No devices were found", "40960 MB"):
        with pytest.raises(ValueError):
            st.parse_smi_memory(bad)


def test_parse_device_query_half():
    parsed = st.parse_device_query(fixture("devicequery-a100-half.txt"))
    assert parsed == {"result": "PASS", "device": "NVIDIA A100-SXM4-40GB", "multiprocessors": 54,
                      "cores_per_mp": 64, "memory_mib": 40326}


def test_parse_device_query_failures():
    parsed = st.parse_device_query(fixture("devicequery-no-device.txt"))
    assert parsed["result"] == "FAIL" and parsed["multiprocessors"] is None
    with pytest.raises(ValueError):
        st.parse_device_query("deviceQuery Starting...\n")
    with pytest.raises(ValueError):
        st.parse_device_query("Device 0: \"X\"\nResult = PASS\n")


def test_parse_namespace_list_and_match_by_container_id():
    rows = st.parse_namespace_list(fixture("mps-namespace-list.txt"))
    assert [r["namespace"] for r in rows][0] == "default"
    pod = bound("fraction-smoke-b")
    assert st.container_id(pod) == CIDS["fraction-smoke-b"]
    assert st.namespace_name_of(pod) == NAMESPACES["fraction-smoke-b"]
    assert st.namespace_of(pod, rows)["active_thread_percentage"] == 50.0
    assert st.namespace_of(bound("fraction-smoke-x"), rows) is None
    not_started = bound("fraction-smoke-a")
    not_started["status"] = {"phase": "Pending"}
    assert st.namespace_name_of(not_started) is None and st.namespace_of(not_started, rows) is None


# The fork's mpsns/name.go: kai_ + the ID mapped into [a-z0-9_] and cut to 16 + _ + 20 hex of its
# SHA-256 (name_test.go's kinds of IDs: a plain one, upper case, hyphens and dots, non-ASCII).
@pytest.mark.parametrize("cid, name", [
    ("container-id", "kai_container_id_3b0f5103c3bc1162b16d"),
    ("a1b2c3d4e5f60718293a4b5c6d7e8f901a2b3c4d5e6f708192a3b4c5d6e7f809", "kai_a1b2c3d4e5f60718_1dd5f3acc7d984cceb1d"),
    ("ABC-DEF", "kai_abc_def_ec4452fc9feaa6e0de5a"),
])
def test_namespace_names_as_the_fork_makes_them(cid, name):
    assert st.mps.fork_namespace_name(cid) == name


@pytest.mark.parametrize("cid", ["cri-containerd-9f8e7d6c5b4a.scope", "UPPER-and-lower_Mixed.123", "unicode-\u00fcn-id",
                                 "/slashes/and:colons", "x" * 300, "-" * 64])
def test_namespace_names_are_always_the_daemons_kind(cid):
    name = st.mps.fork_namespace_name(cid)
    assert re.fullmatch(r"kai_[a-z0-9_]{1,16}_[0-9a-f]{20}", name) and len(name) <= 41
    assert st.mps.namespace_name("n", name) == name


def test_namespace_names_differ_for_ids_that_sanitize_alike():
    ids = ["abc-def", "abc_def", "ABC-DEF", "abc.def", "abc def"]
    assert len(set(st.mps.fork_namespace_name(i) for i in ids)) == len(ids)
    for empty in ("", "   "):
        with pytest.raises(ValueError):
            st.mps.fork_namespace_name(empty)


@pytest.mark.parametrize("product, override, count", [
    ("NVIDIA A100-SXM4-40GB", None, 108), ("NVIDIA-A100-SXM4-80GB", None, 108), ("NVIDIA H100 80GB HBM3", None, 132),
    ("NVIDIA H100 PCIe", None, 114), ("NVIDIA L40S", None, 142), ("NVIDIA A10", None, 72),
    ("Mystery GPU", None, None), (None, None, None), ("NVIDIA A100", 98, 98)])
def test_sm_count_for(product, override, count):
    assert st.sm_count_for(product, override) == count


# ---------------------------------------------------------------- check 1: the binder
def decisions(*pods):
    return [st.binder_decision(p) for p in pods]


def test_binder_decision_reads_the_annotations():
    d = st.binder_decision(bound("fraction-smoke-a"))
    assert (d["portion"], d["memory_request_mib"], d["memory_limit_mib"], d["devices"], d["node"], d["gpu_group"]) \
        == (0.5, HALF, HALF, [GPU], "gpu-node-07", "group-1")
    assert d["problems"] == []


def test_binder_passes():
    check = st.check_binder("gpu-node-07", decisions(bound("fraction-smoke-a"), bound("fraction-smoke-b")), 0.5)
    assert check["passed"], check["message"]
    assert check["gpu"] == GPU and check["evidence"]["portion_total"] == 1.0


def test_binder_pods_on_different_gpus_is_a_warning_naming_both():
    check = st.check_binder("gpu-node-07", decisions(bound("fraction-smoke-a"), bound("fraction-smoke-b", gpu=OTHER_GPU)),
                            0.5)
    assert check["passed"], check["message"]
    assert check["gpu"] is None and len(check["warnings"]) == 1
    assert "fraction-smoke-a on %s" % GPU in check["warnings"][0] and "fraction-smoke-b on %s" % OTHER_GPU in \
        check["warnings"][0] and "bin-packs" in check["warnings"][0]


def test_binder_empty_uuid_is_a_mismatched_fork_pair():
    pod = bound("fraction-smoke-b", gpu=None)
    pod["metadata"]["annotations"][st.RECEIVED_RESOURCE_TYPE] = "Regular"
    check = st.check_binder("n", decisions(bound("fraction-smoke-a"), pod), 0.5)
    assert not check["passed"]
    assert "empty gpus.devices" in check["message"] and "matched pair" in check["message"]


@pytest.mark.parametrize("b, words", [
    (dict(node="gpu-node-08"), "different nodes"),
    (dict(portion=None), "no gpu-compute.portion"),
    (dict(portion="0.75"), "portion 0.75, asked 0.5"),
    (dict(memory=None), "no gpu-memory.request"),
    (dict(gpu=None), "empty gpus.devices"),
    (dict(gpu=GPU + "," + OTHER_GPU), "names 2 GPUs"),
    (dict(gpu="3"), "is not a GPU UUID"),
    (dict(portion="half"), "is not a number"),
])
def test_binder_fails(b, words):
    check = st.check_binder("gpu-node-07", decisions(bound("fraction-smoke-a"), bound("fraction-smoke-b", **b)), 0.5)
    assert not check["passed"]
    assert words in check["message"]


def test_binder_names_another_scheduler():
    pod = bound("fraction-smoke-b", portion=None, memory=None, gpu=None)
    pod["spec"]["schedulerName"] = "default-scheduler"
    check = st.check_binder("n", decisions(bound("fraction-smoke-a"), pod), 0.5)
    assert not check["passed"] and "placed by default-scheduler, not kai-scheduler" in check["message"]


def test_binder_portions_over_one():
    pods = [bound("fraction-smoke-a", portion="0.6"), bound("fraction-smoke-b", portion="0.6")]
    check = st.check_binder("n", decisions(*pods), 0.6)
    assert not check["passed"] and "add up to 1.2" in check["message"]


# ---------------------------------------------------------------- check 2: injection
def test_injection_passes_on_recorded_env_with_the_guides_formula():
    d = decisions(bound("fraction-smoke-a"))
    check = st.check_injection("n", d, {"fraction-smoke-a": st.parse_env(fixture("env-smoke-a.txt"))}, 0.5, GPU_MEMORY)
    assert check["passed"], check["message"]
    assert check["evidence"]["fraction-smoke-a"]["NVIDIA_GPU_MEMORY_LIMIT"] == "19968"
    assert check["evidence"]["expected"]["memory_mib"] == HALF == st.expected_memory_mib(40960, 0.5)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=19968M" in check["message"] and check["warnings"] == []


def test_injection_accepts_and_reports_either_memory_spelling():
    d = decisions(bound("fraction-smoke-a"))
    check = st.check_injection("n", d, {"fraction-smoke-a": good_env(plural=True)}, 0.5, GPU_MEMORY)
    assert check["passed"], check["message"]
    assert "NVIDIA_GPU_MEMORY_LIMITS" in check["message"]
    assert check["evidence"]["memory_variables"]["fraction-smoke-a"] == ["NVIDIA_GPU_MEMORY_LIMITS",
                                                                         "NVIDIA_GPU_MEMORY_REQUESTS"]


def test_injection_without_the_node_label_compares_with_the_binder_and_warns():
    check = st.check_injection("n", decisions(bound("fraction-smoke-a")), {"fraction-smoke-a": good_env()}, 0.5, None)
    assert check["passed"] and "nvidia.com/gpu.memory" in check["warnings"][0]


@pytest.mark.parametrize("env, words", [
    (good_env(gpu=OTHER_GPU), "NVIDIA_VISIBLE_DEVICES=%s but the binder chose %s" % (OTHER_GPU, GPU)),
    (good_env(pct="100"), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100, expected 50"),
    (good_env(memory="40960"), "NVIDIA_GPU_MEMORY_LIMIT=40960"),
    (good_env(pinned="0=20480M"), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M, expected 0=19968M: (40960 MiB - 1024) x 0.5"),
    (good_env(pinned="0=19968M,1=19968M"), "expected 0=19968M"),
    (good_env(pipe="/run/nvidia-mps/shared/default"), "the server's default namespace"),
    (good_env(gpu="void"), "NVIDIA_VISIBLE_DEVICES=void: the KAI-Scheduler fork and the gpu-fractioning fork are a "
                           "matched pair"),
    (dict((k, v) for k, v in good_env().items() if "MEMORY_LIMIT" not in k),
     "neither NVIDIA_GPU_MEMORY_LIMIT nor NVIDIA_GPU_MEMORY_LIMITS injected"),
    (dict((k, v) for k, v in good_env().items() if k != "CUDA_MPS_PIPE_DIRECTORY"), "CUDA_MPS_PIPE_DIRECTORY not injected"),
    ({"NVIDIA_VISIBLE_DEVICES": GPU}, "no CUDA_MPS_* variable at all: fractiond did not adjust the container (not "
                                      "registered with NRI"),
])
def test_injection_fails(env, words):
    check = st.check_injection("n", decisions(bound("fraction-smoke-a")), {"fraction-smoke-a": env}, 0.5, GPU_MEMORY)
    assert not check["passed"]
    assert words in check["message"], check["message"]


def test_injection_names_a_binder_that_reserves_other_memory():
    pod = bound("fraction-smoke-a", memory="20480Mi")
    check = st.check_injection("n", decisions(pod), {"fraction-smoke-a": good_env(memory="20480", pinned="0=19968M")},
                               0.5, GPU_MEMORY)
    assert not check["passed"] and "reservedGpuMemory 1024 MiB?" in check["message"]
    assert st.check_injection("n", decisions(pod), {"fraction-smoke-a": good_env(memory="20480", pinned="0=20480M")},
                              0.5, GPU_MEMORY, reserved_mib=0)["passed"]


# ---------------------------------------------------------------- check 3: MPS
def test_mps_passes_on_the_guides_listing():
    pods = [bound("fraction-smoke-a"), bound("fraction-smoke-b")]
    rows = st.parse_namespace_list(fixture("mps-namespace-list.txt"))
    check = st.check_mps("n", decisions(*pods), pods, rows, "cmd")
    assert check["passed"], check["message"]
    assert check["evidence"]["pods"]["fraction-smoke-a"]["namespace"] == NAMESPACES["fraction-smoke-a"]
    assert "at 50.00" in check["message"] and "default at 10.00" in check["message"] and check["warnings"] == []


def test_mps_fails_on_wrong_percentage_and_missing_namespace():
    pods = [bound("fraction-smoke-a"), bound("fraction-smoke-b")]
    rows = st.parse_namespace_list(fixture("mps-namespace-list.txt"))
    rows[1]["active_thread_percentage"] = 100.0
    check = st.check_mps("n", decisions(*pods), pods, rows[:2], "cmd")
    assert not check["passed"]
    assert "namespace %s at 100.00, expected 50.00" % NAMESPACES["fraction-smoke-a"] in check["message"]
    assert "fraction-smoke-b: no MPS namespace %s (named from container ID %s)" % (
        NAMESPACES["fraction-smoke-b"], CIDS["fraction-smoke-b"]) in check["message"]


def test_mps_default_namespace_must_be_capped():
    pods = [bound("fraction-smoke-a"), bound("fraction-smoke-b")]
    rows = st.parse_namespace_list(fixture("mps-namespace-list.txt"))
    rows[0]["active_thread_percentage"] = 100.0
    check = st.check_mps("n", decisions(*pods), pods, rows, "cmd")
    assert not check["passed"] and "namespace default at 100.00, expected 10.00" in check["message"]
    assert st.check_mps("n", decisions(*pods), pods, rows, "cmd", default_percentage=100)["passed"]
    check = st.check_mps("n", decisions(*pods), pods, rows[1:], "cmd")
    assert not check["passed"] and "no default namespace" in check["message"]


def test_mps_namespaces_of_earlier_runs_linger_as_a_warning():
    pods = [bound("fraction-smoke-a"), bound("fraction-smoke-b")]
    rows = st.parse_namespace_list(fixture("mps-namespace-list.txt") + "kai_0123456789abcdef_a8ae6e6ee929abea3afc  50.00  unlimited\n")
    check = st.check_mps("n", decisions(*pods), pods, rows, "cmd")
    assert check["passed"] and check["evidence"]["lingering"] == ["kai_0123456789abcdef_a8ae6e6ee929abea3afc"]
    assert "linger about a minute" in check["warnings"][0]


# ---------------------------------------------------------------- check 4: memory
def test_memory_passes_and_fails():
    d = decisions(bound("fraction-smoke-a"))
    assert st.check_memory("n", d, {"fraction-smoke-a": [HALF]})["passed"]
    check = st.check_memory("n", d, {"fraction-smoke-a": [40960]})
    assert not check["passed"] and "memory not capped" in check["message"]
    assert not st.check_memory("n", d, {"fraction-smoke-a": None})["passed"]


# ---------------------------------------------------------------- SM share
def test_sm_share_half_of_an_a100():
    parsed = st.parse_device_query(fixture("devicequery-a100-half.txt"))
    check = st.check_sm_share("n", 0.5, parsed, st.sm_count_for(parsed["device"]))
    assert check["passed"], check["message"]
    assert check["evidence"]["expected_multiprocessors"] == 54


def test_sm_share_fails_when_the_cap_is_ignored():
    parsed = st.parse_device_query(fixture("devicequery-a100-uncapped.txt"))
    check = st.check_sm_share("n", 0.5, parsed, 108)
    assert not check["passed"] and "sees 108 multiprocessors, expected 54 of 108" in check["message"]


def test_sm_share_fails_without_device_or_count():
    assert not st.check_sm_share("n", 0.5, st.parse_device_query(fixture("devicequery-no-device.txt")), 108)["passed"]
    check = st.check_sm_share("n", 0.5, st.parse_device_query(fixture("devicequery-a100-half.txt")), None)
    assert not check["passed"] and "gpu_sm_count" in check["message"]
    assert not st.check_sm_share("n", 0.5, None, 108)["passed"]


# ---------------------------------------------------------------- why pending
def pending(**changes):
    pod = st.pod_manifest("fraction-smoke-a", "default", "default-queue", 0.5, st.DEFAULT_IMAGE)
    pod["metadata"]["uid"] = "u1"
    pod["status"] = {"phase": "Pending"}
    for key, value in changes.items():
        if key == "labels":
            pod["metadata"]["labels"] = value
        else:
            pod["spec"][key] = value
    return pod


GPU_NODE = {"metadata": {"name": "gpu-node-07"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
CPU_NODE = {"metadata": {"name": "cpu-node-01"}, "status": {"allocatable": {"cpu": "16"}}}
QUEUES = [{"metadata": {"name": "default-parent-queue"}, "spec": {}},
          {"metadata": {"name": "default-queue"}, "spec": {"parentQueue": "default-parent-queue"}}]


def causes(pod, **kwargs):
    kwargs.setdefault("nodes", [GPU_NODE])
    kwargs.setdefault("queues", QUEUES)
    return [c["cause"] for c in st.diagnose(pod, **kwargs)], st.diagnose(pod, **kwargs)


def test_pending_scheduler_name():
    names, found = causes(pending(schedulerName="default-scheduler"))
    assert names[0] == "scheduler_name"
    assert "'default-scheduler', not 'kai-scheduler'" in found[0]["message"]


def test_pending_scheduler_name_absent_is_the_default_scheduler():
    pod = pending()
    del pod["spec"]["schedulerName"]
    assert causes(pod)[0][0] == "scheduler_name"


def test_pending_queue_label_missing_and_legacy():
    names, found = causes(pending(labels={"runai/queue": "team-a"}))
    assert names[0] == "queue_label_missing"
    assert "old runai/queue=team-a label" in found[0]["message"]


def test_pending_queue_unknown():
    names, found = causes(pending(labels={"kai.scheduler/queue": "nope"}))
    assert names == ["queue_unknown"]
    assert "default-parent-queue, default-queue" in found[0]["message"]


def test_pending_queue_not_leaf():
    names, found = causes(pending(labels={"kai.scheduler/queue": "default-parent-queue"}))
    assert names == ["queue_not_leaf"]
    assert "children (default-queue)" in found[0]["message"]


def test_pending_queues_unreadable_skips_queue_rules():
    names = causes(pending(labels={"kai.scheduler/queue": "nope"}), queues=None)[0]
    assert "queue_unknown" not in names


def test_pending_no_gpu_nodes():
    names, found = causes(pending(), nodes=[CPU_NODE])
    assert names[0] == "no_gpu_nodes"
    assert "device plugin" in found[0]["message"]


def test_pending_on_a_cordoned_node_without_the_toleration():
    cordoned = dict(GPU_NODE, spec={"unschedulable": True})
    pod = pending(nodeSelector={"kubernetes.io/hostname": "gpu-node-07"})
    names, found = causes(pod, nodes=[cordoned])
    assert names[0] == "node_cordoned"
    assert "node gpu-node-07 is cordoned" in found[0]["message"] and "tolerate_unschedulable" in found[0]["message"]
    pod["spec"]["tolerations"] = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                   "effect": "NoSchedule"}]
    assert "node_cordoned" not in causes(pod, nodes=[cordoned])[0]
    assert "node_cordoned" not in causes(pending(nodeSelector={"kubernetes.io/hostname": "gpu-node-07"}))[0]


def reservation_pod(runtime="nvidia", waiting=None, phase="Pending", gpu=None, restarts=0, last_exit=None):
    pod = {"metadata": {"name": "gpu-reservation-3f2a9c01d4e5b6a7", "namespace": "kai-resource-reservation",
                        "labels": {"app": "kai-resource-reservation", st.GPU_GROUP_LABEL: "group-1"},
                        "annotations": {}},
           "spec": {"nodeName": "gpu-node-07", "containers": [{"name": "resource-reservation"}]},
           "status": {"phase": phase, "containerStatuses": []}}
    if runtime:
        pod["spec"]["runtimeClassName"] = runtime
    if gpu:
        pod["metadata"]["annotations"][st.RESERVATION_GPU_ANNOTATION] = gpu
    status = {"name": "resource-reservation", "restartCount": restarts, "state": {}}
    if waiting:
        status["state"]["waiting"] = {"reason": waiting, "message": "back-off restarting failed container"}
    if last_exit is not None:
        status["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
    if waiting or last_exit is not None:
        pod["status"]["containerStatuses"] = [status]
    return pod


def test_pending_reservation_pod_without_runtime_class():
    res = reservation_pod(runtime=None, waiting="CrashLoopBackOff", restarts=4, last_exit=1)
    names, found = causes(pending(), reservation_pods=[res], runtime_classes=["nvidia"])
    assert names[0] == "reservation_pod_failed"
    assert "no runtimeClassName" in found[0]["message"] and "binder.runtimeClassName=nvidia" in found[0]["message"]
    assert "CrashLoopBackOff" in found[0]["message"]


def test_pending_reservation_pod_runtime_class_missing():
    res = reservation_pod(runtime="nvidia")
    event = {"involvedObject": {"name": res["metadata"]["name"]}, "type": "Warning", "reason": "FailedCreatePodSandBox",
             "message": 'RuntimeClass "nvidia" not found'}
    names, found = causes(pending(), reservation_pods=[res], reservation_events=[event], runtime_classes=[])
    assert names[0] == "reservation_pod_failed"
    assert "RuntimeClass 'nvidia' does not exist" in found[0]["message"]
    assert 'RuntimeClass "nvidia" not found' in found[0]["message"]


def test_pending_reservation_pod_that_works_is_not_a_cause():
    res = reservation_pod(gpu=GPU, phase="Running")
    names = causes(pending(), reservation_pods=[res], runtime_classes=["nvidia"])[0]
    assert "reservation_pod_failed" not in names


def test_pending_reservation_pod_with_only_a_retried_mount_warning_is_still_starting():
    res = reservation_pod(runtime="nvidia")
    event = {"involvedObject": {"name": res["metadata"]["name"]}, "type": "Warning", "reason": "FailedMount",
             "message": 'MountVolume.SetUp failed for volume "token": failed to sync secret cache: '
                        'timed out waiting for the condition'}
    names, found = causes(pending(), reservation_pods=[res], reservation_events=[event], runtime_classes=["nvidia"])
    assert "reservation_pod_failed" not in names
    assert names[0] == "reservation_pod_starting" and "failed to sync secret cache" in found[0]["message"]


def test_pending_reservation_loop():
    events = [{"involvedObject": {"name": "gpu-reservation-%d" % i}, "type": "Warning",
               "reason": "UnexpectedAdmissionError", "count": 2,
               "message": "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                          "Requested: 1, Available: 0, which is unexpected"} for i in range(3)]
    names, found = causes(pending(), reservation_pods=[reservation_pod(phase="Failed")], reservation_events=events)
    assert names[0] == "reservation_pod_loop"
    assert "6 times" in found[0]["message"] and "Requested: 1, Available: 0" in found[0]["message"]
    assert "reservation_pod_failed" not in names


def test_pending_unschedulable_message_from_the_scheduler():
    pod = pending()
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "Unable to schedule pod: gpu-node-07: no GPU with 0.5 free"}]
    events = [{"type": "Warning", "reason": "Unschedulable",
               "message": "Unable to schedule pod: gpu-node-07: no GPU with 0.5 free"}]
    group = {"metadata": {"name": "pg-fraction-smoke-a"}, "status": {"schedulingConditions": [
        {"type": "UnschedulableOnNodePool", "message": "Not enough GPUs"}]}}
    names, found = causes(pod, events=events, podgroups=[group])
    assert names == ["unschedulable"]
    assert found[0]["message"].count("no GPU with 0.5 free") == 1
    assert "PodGroup pg-fraction-smoke-a: Not enough GPUs" in found[0]["message"]


# The guide's troubleshooting rows that a pod's own events show.
@pytest.mark.parametrize("event, cause, words", [
    ({"reason": "BindingError", "type": "Warning", "message": "Failed to bind pod default/fraction-smoke-a to node "
      "gpu-node-07: plugin nvfractions failed in PreBind: failed to set NvFractions memory annotation: node does not "
      "include nvidia.com/gpu.memory label"}, "gpu_memory_label_missing", "run GPU Feature Discovery"),
    ({"reason": "Failed", "type": "Warning", "message": "Error: failed to create containerd task: error running "
      "createRuntime hook #0: exit status 1: failed to set memory limits for gpu 0: Insufficient Permissions"},
     "memory_limit_hook_unsupported", "gpuOperator.minimumVersion=v26.7.0"),
    ({"reason": "Failed", "type": "Warning", "message": "Error: container \"main\" in pod \"fraction-smoke-a\": "
      "provisioning its MPS namespace: creating MPS namespace failed"}, "mps_namespace_refused", "fails closed"),
])
def test_pending_troubleshooting_rows_are_named(event, cause, words):
    causes = st.diagnose(pending(nodeName="gpu-node-07") if cause != "gpu_memory_label_missing" else pending(),
                         [event], [GPU_NODE], QUEUES)
    found = [c for c in causes if c["cause"] == cause]
    assert found and words in found[0]["message"], causes


def test_pending_nothing_from_kai():
    names, found = causes(pending())
    assert names == ["no_scheduler_activity"]
    assert "kai-scheduler get pods" in found[0]["message"]


PULL_FAILED = {"type": "Warning", "reason": "Failed",
               "message": 'Failed to pull image "reg:5000/cuda:13": 401 Unauthorized'}


def test_bound_image_pull_that_failed_once_is_still_being_retried():
    pod = pending(nodeName="gpu-node-07")
    pod["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {
        "reason": "ErrImagePull", "message": "401 Unauthorized"}}}]
    names, found = causes(pod, events=[PULL_FAILED])
    assert names == ["image_pull_retrying"]
    assert "failed pulls: 1" in found[0]["message"]


@pytest.mark.parametrize("events", [[PULL_FAILED, PULL_FAILED], [dict(PULL_FAILED, count=3)]])
def test_bound_image_pull_that_failed_again_is_named(events):
    pod = pending(nodeName="gpu-node-07")
    pod["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]
    names, found = causes(pod, events=events)
    assert names == ["image_pull"]
    assert "ImagePullBackOff" in found[0]["message"] and "pull secret" in found[0]["message"]
    # The back-off's message says only that it waits; the registry's answer comes from the last failed pull.
    assert "last failed pull: " + PULL_FAILED["message"] in found[0]["message"]


def test_the_registrys_answer_is_named_after_the_back_off_events():
    pod = pending(nodeName="gpu-node-07")
    pod["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]
    back_off = {"type": "Warning", "reason": "Failed", "message": "Error: ImagePullBackOff"}
    _names, found = causes(pod, events=[PULL_FAILED, back_off, back_off])
    assert "last failed pull: " + PULL_FAILED["message"] in found[0]["message"], found[0]["message"]


def test_a_pull_failure_already_in_the_waiting_message_is_not_repeated():
    pod = pending(nodeName="gpu-node-07")
    pod["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {
        "reason": "ErrImagePull", "message": PULL_FAILED["message"]}}}]
    _names, found = causes(pod, events=[PULL_FAILED, PULL_FAILED])
    assert found[0]["message"].count(PULL_FAILED["message"]) == 1 and "last failed pull" not in found[0]["message"]


def test_bound_not_ready_names_warnings():
    pod = pending(nodeName="gpu-node-07")
    names, found = causes(pod, events=[{"type": "Warning", "reason": "FailedMount", "message": "no pipe dir"}])
    assert names == ["not_ready"] and "FailedMount: no pipe dir" in found[0]["message"]


# ---------------------------------------------------------------- reports
def a_run(passed=True):
    pods = [bound("fraction-smoke-a"), bound("fraction-smoke-b")]
    d = decisions(*pods)
    envs = {"fraction-smoke-a": good_env(), "fraction-smoke-b": good_env()}
    views = {"fraction-smoke-a": [HALF], "fraction-smoke-b": [HALF if passed else 40960]}
    listing = st.parse_namespace_list(fixture("mps-namespace-list.txt"))
    rows_ns = dict((p["metadata"]["name"], st.namespace_of(p, listing)) for p in pods)
    dq = {"pod": "fraction-devicequery", "gpu": GPU, "portion": 0.5, "memory_cap_mib": HALF,
          "parsed": st.parse_device_query(fixture("devicequery-a100-half.txt"))}
    checks = [st.check_binder("gpu-node-07", d, 0.5), st.check_injection("gpu-node-07", d, envs, 0.5, GPU_MEMORY),
              st.check_mps("gpu-node-07", d, pods, listing, "cmd"),
              st.check_memory("gpu-node-07", d, views),
              st.check_sm_share("gpu-node-07", 0.5, dq["parsed"], 108)]
    rows = st.summary_rows("gpu-node-07", d, envs, rows_ns, views, dq)
    return {"node": "gpu-node-07", "rows": rows, "checks": checks, "passed": all(c["passed"] for c in checks)}


def test_table_per_node_and_gpu():
    lines = st.table(a_run()["rows"])
    assert lines[0].split()[:3] == ["NODE", "GPU", "POD"]
    assert len(lines) == 4
    assert lines[1].split()[:6] == ["gpu-node-07", GPU, "fraction-smoke-a", "0.5", "19968", "50"]
    assert lines[3].split()[-1] == "54"


def test_check_lines_name_node_gpu_and_check():
    lines = st.check_lines(a_run(passed=False)["checks"])
    failed = [line for line in lines if line.startswith("FAIL")]
    assert len(failed) == 1
    assert "4. pod's view of GPU memory" in failed[0] and "gpu-node-07 %s" % GPU in failed[0]


def test_markdown_report():
    text = st.markdown([a_run(), dict(a_run(passed=False), node="gpu-node-08", passed=False)])
    assert "## Node gpu-node-07: passed" in text and "## Node gpu-node-08: FAILED" in text
    assert "| NODE | GPU | POD |" in text
    assert text.count("**FAIL**") == 1


def test_junit_one_case_per_check_per_node():
    broken = dict(a_run(passed=False), node="gpu-node-08")
    never = {"node": "gpu-node-09", "checks": [], "error": "pods not ready after 180s: <queue_unknown>"}
    root = ET.fromstring(st.junit([a_run(), broken, never]))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 15
    assert suite.get("tests") == "15" and suite.get("failures") == "6"
    failing = [(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None]
    assert ("fraction_smoke_test.gpu-node-08", "memory") in failing
    assert all(("fraction_smoke_test.gpu-node-09", name) in failing for name in st.CHECKS)
    assert "<queue_unknown>" in [c for c in cases if c.get("classname").endswith("09")][0].find("failure").get(
        "message")


def test_run_key():
    assert st.run_key(None) == "any"
    assert st.run_key("gpu-node-07.example.com") == "gpu-node-07.example.com"
    assert len(st.run_key("x" * 300)) == 63


def test_decision_does_not_change_the_pod():
    pod = bound("fraction-smoke-a")
    before = copy.deepcopy(pod)
    st.binder_decision(pod)
    assert pod == before


def test_events_of_an_earlier_pod_of_the_same_name_are_left_out():
    """The smoke test reuses its pods' names: a Pending pod must not inherit the
    causes of the run before it (CI: a killed run's successor was diagnosed with
    an earlier test's missing label and unknown queue, and gave up after settle)."""
    pod = {"metadata": {"name": "fraction-smoke-a", "uid": "uid-now"}}
    now = {"involvedObject": {"name": "fraction-smoke-a", "uid": "uid-now"}, "reason": "BindingError"}
    before = {"involvedObject": {"name": "fraction-smoke-a", "uid": "uid-before"}, "reason": "Unschedulable"}
    no_uid = {"involvedObject": {"name": "fraction-smoke-a"}, "reason": "Scheduled"}
    assert st.events_of(pod, [now, before, no_uid]) == [now, no_uid]
    assert st.events_of({"metadata": {"name": "fraction-smoke-a"}}, [now, before]) == [now, before]


# ---------------------------------------------------------------- who placed a pod
def placed_pod(node="gpu-node-07", scheduler="kai-scheduler", uid="u1", conditions=None):
    spec = {"schedulerName": scheduler} if scheduler else {}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "half-gpu", "namespace": "gpu-trial", "uid": uid}, "spec": spec,
            "status": {"conditions": conditions if conditions is not None else
                       [{"type": "PodScheduled", "status": "True" if node else "False",
                         "message": "" if node else "0/2 nodes are available"}]}}


def scheduled(component=None, reporting=None, uid="u1", message="Successfully assigned gpu-trial/half-gpu"):
    event = {"reason": "Scheduled", "message": message, "involvedObject": {"kind": "Pod", "name": "half-gpu", "uid": uid}}
    if component is not None:
        event["source"] = {"component": component}
    if reporting is not None:
        event["reportingComponent"] = reporting
    return event


PULLED = {"reason": "Pulled", "message": "image present", "source": {"component": "kubelet"},
          "involvedObject": {"uid": "u1"}}


@pytest.mark.parametrize("pod, events, scheduler, expected", [
    # KAI placed it: the core/v1 event names it in source.component
    (placed_pod(), [PULLED, scheduled("kai-scheduler")], "kai-scheduler",
     {"scheduler_name": "kai-scheduler", "node": "gpu-node-07", "placed_by": "kai-scheduler",
      "message": "Successfully assigned gpu-trial/half-gpu", "ok": True, "problem": None}),
    # events.k8s.io writes only reportingComponent
    (placed_pod(), [scheduled(reporting="kai-scheduler")], "kai-scheduler",
     {"placed_by": "kai-scheduler", "ok": True}),
    # source.component wins over another event's reportingComponent
    (placed_pod(), [scheduled(reporting="other"), scheduled("kai-scheduler", message="second")], "kai-scheduler",
     {"placed_by": "kai-scheduler", "message": "Successfully assigned gpu-trial/half-gpu"}),
    # the pod names KAI but the default scheduler bound it
    (placed_pod(), [scheduled("default-scheduler")], "kai-scheduler",
     {"placed_by": "default-scheduler", "ok": False, "problem": "other_scheduler"}),
    # the pod names no scheduler: the API server's default
    (placed_pod(scheduler=None), [scheduled("default-scheduler")], "kai-scheduler",
     {"scheduler_name": "default-scheduler", "problem": "other_scheduler"}),
    # bound, but no Scheduled event to say by whom
    (placed_pod(), [], "kai-scheduler", {"placed_by": "", "message": "", "problem": "other_scheduler"}),
    # an earlier pod's event (another uid) says nothing about this one
    (placed_pod(), [scheduled("kai-scheduler", uid="old")], "kai-scheduler", {"placed_by": "", "ok": False}),
    # not placed: the condition's message says why
    (placed_pod(node=None), [], "kai-scheduler",
     {"node": "", "waiting": "0/2 nodes are available", "ok": False, "problem": "not_placed"}),
    # no scheduler looked at it
    (placed_pod(node=None, conditions=[]), [], "kai-scheduler",
     {"waiting": "no PodScheduled condition: no scheduler looked at it", "problem": "not_placed"}),
    # the pod was not found
    ({}, [], "kai-scheduler", {"scheduler_name": "default-scheduler", "node": "", "problem": "not_placed"}),
    # without a scheduler to compare with: only what was read
    (placed_pod(), [scheduled("kai-scheduler")], None, {"placed_by": "kai-scheduler"}),
])
def test_placement(pod, events, scheduler, expected):
    found = st.placement(pod, events, scheduler)
    assert {key: found[key] for key in expected} == expected
    if scheduler is None:
        assert "ok" not in found and "problem" not in found
    else:
        assert found["problem"] in (None,) + st.PLACEMENT_PROBLEMS


def test_the_binder_and_the_diagnosis_read_placement_the_same_way():
    unnamed = placed_pod(scheduler=None, node=None)
    assert st.binder_decision(unnamed)["scheduler"] == st.placement(unnamed)["scheduler_name"] == "default-scheduler"
    assert st.binder_decision(unnamed)["node"] is None
    assert st.binder_decision(placed_pod())["node"] == st.placement(placed_pod())["node"] == "gpu-node-07"
    assert "scheduler_name" in [c["cause"] for c in st.diagnose(unnamed)]
    assert "scheduler_name" not in [c["cause"] for c in st.diagnose(placed_pod(scheduler="other"))]


REFUSED = "HTTPSConnectionPool(host='127.0.0.1', port=6443): Max retries exceeded with url: /api/v1/x " \
          "(Caused by NewConnectionError('Connection refused'))"


@pytest.mark.parametrize("cause, words, failure", [
    pytest.param(st.SmokeError("reading pod smoke/a: " + REFUSED, "cluster", pending=[1]),
                 ["reading pod smoke/a: HTTPSConnectionPool", "Also, the test pods could not be deleted (deleting pod",
                  "a, b left in the cluster; the next run deletes them before it starts",
                  "The API server stopped answering: check it (kubectl get --raw /readyz), then run again"], "cluster",
                 id="api-server-lost-while-waiting"),
    pytest.param(st.SmokeError("pods not ready after 60s", "pending"), ["pods not ready after 60s. Also,"], "pending",
                 id="the-causes-own-failure-kept"),
    pytest.param(RuntimeError("boom"), ["boom. Also, the test pods"], "cluster", id="an-unnamed-cause"),
    pytest.param(None, ["The test pods could not be deleted (deleting pod"], "cluster", id="only-the-cleanup-failed"),
])
def test_pods_left_by_a_run_that_could_not_clean_up_are_named(cause, words, failure):
    error = st.pods_left(cause, st.SmokeError("deleting pod smoke/a: " + REFUSED, "cluster"), ["a", "b"])
    for word in words:
        assert word in error.msg, (word, error.msg)
    assert error.failure == failure
    if isinstance(cause, st.SmokeError):
        assert error.details == cause.details

# Apache-2.0
"""The greedy-neighbour check (smoke_checks.check_greedy, greedy_manifests) on
composed probe results, one row per enforcement that can be missing: which part
fails and what the message says to do. The same results from the lab's
stand-ins, knob by knob: tests/unit/lab/test_standin_gpu_probe.py."""
import copy

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as st

GPU = "GPU-5f2a6c7e-0a1b-4c3d-8e9f-000000000003"
OTHER = "GPU-5f2a6c7e-0a1b-4c3d-8e9f-000000000004"


def decision(name, gpu=GPU, limit="40448Mi"):
    notes = {st.annotation("main", st.PORTION): "0.5", st.annotation("main", st.MEMORY_REQUEST): limit}
    if gpu:
        notes[st.annotation("main", st.DEVICES)] = gpu
    return st.binder_decision({"metadata": {"name": name, "annotations": notes},
                               "spec": {"nodeName": "gpu-node-07", "schedulerName": "kai-scheduler"}})


def allocation(what, mib, ok, code=None):
    code = (0 if ok else 2) if code is None else code
    names = {0: "CUDA_SUCCESS", 2: "CUDA_ERROR_OUT_OF_MEMORY", 1: "CUDA_ERROR_INVALID_VALUE"}
    return {"what": what, "mib": mib, "ok": ok, "code": code, "result": names[code]}


# What the probe prints on a GPU whose caps hold (the lab's A100-80GB: cap (81920 - 1024) x 0.5).
GREEDY = {"role": "greedy", "asked": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
                                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": None},
          "cap_mib": 40448, "cap_from": "NVIDIA_GPU_MEMORY_LIMIT", "device": "NVIDIA A100-SXM4-80GB",
          "multiprocessors": 54, "total_memory_mib": 81920, "error": None, "held_mib": 32358,
          "allocations": [allocation("within", 32358, True), allocation("beyond", 45504, False)]}
NEIGHBOUR = dict(GREEDY, role="neighbour", asked={}, allocations=[allocation("within", 32358, True)])


def changed(base, **changes):
    found = copy.deepcopy(base)
    found.update(changes)
    return found


UNCAPPED = changed(GREEDY, held_mib=77862,
                   allocations=[allocation("within", 32358, True), allocation("beyond", 45504, True)])

# (case, greedy result, neighbour result, decisions' GPUs, words in the message; None = passes)
CASES = [
    ("enforced", GREEDY, NEIGHBOUR, (GPU, GPU), None),
    # lab knob driver.memory-uncapped: nothing below the pod enforces its memory cap
    ("memory_not_enforced", UNCAPPED, NEIGHBOUR, (GPU, GPU),
     ["GPU memory cap not enforced", "dropped its own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
      "allocated 45504 MiB beyond its 40448 MiB cap (holding 77862 MiB)", "GPU Operator v26.7.1",
      "NonMemoryEnforced", "GPU memory enforcement"]),
    # lab knob mps.ignore-cap: the server grants every client all the SMs
    ("sms_not_capped", changed(GREEDY, multiprocessors=108), changed(NEIGHBOUR, multiprocessors=108), (GPU, GPU),
     ["SM cap not enforced", "asked CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 and sees 108 of 108 SMs, its share is 54",
      "its neighbour fraction-neighbour, which keeps to its share, sees 108 of 108 SMs",
      "does not hold a client to its namespace's active thread percentage"]),
    # the neighbour could not get its share of memory beside the greedy pod (a real GPU, uncapped)
    ("neighbour_starved", UNCAPPED, changed(NEIGHBOUR, allocations=[allocation("within", 32358, False)]),
     (GPU, GPU), ["GPU memory cap not enforced", "its neighbour fraction-neighbour could not allocate 32358 MiB "
                  "within its 40448 MiB cap while the greedy pod held 77862 MiB", "took its memory"]),
    # fractiond injected no memory cap (no NVIDIA_GPU_MEMORY_LIMIT, no pinned limit)
    ("no_cap_injected", changed(GREEDY, cap_mib=None, cap_from=None, allocations=[], held_mib=0,
                                error="no GPU memory cap in the environment (...): nothing to hold the pod to"),
     NEIGHBOUR, (GPU, GPU), ["no GPU memory cap in the environment", "fractiond injects the cap: check 2"]),
    ("another_refusal", changed(GREEDY, allocations=[allocation("within", 32358, True),
                                                     allocation("beyond", 45504, False, code=1)]),
     NEIGHBOUR, (GPU, GPU), ["refused 45504 MiB beyond its cap with CUDA_ERROR_INVALID_VALUE",
                             "no proof of a memory cap"]),
    ("probe_broken", changed(GREEDY, allocations=[allocation("within", 32358, False),
                                                  allocation("beyond", 45504, False)], held_mib=0),
     NEIGHBOUR, (GPU, GPU), ["could not allocate 32358 MiB within its 40448 MiB cap", "proves nothing"]),
    ("no_driver", {"role": "greedy", "multiprocessors": None, "error": "cannot load libcuda.so.1 (x): is the pod run "
                   "by the NVIDIA runtime"}, NEIGHBOUR, (GPU, GPU),
     ["the greedy pod fraction-greedy: the probe could not run: cannot load libcuda.so.1"]),
    ("no_result", None, NEIGHBOUR, (GPU, GPU), ["its probe gave no result (python3: not found)"]),
    ("split", GREEDY, NEIGHBOUR, (GPU, OTHER), ["were put on different GPUs", "had no neighbour to take from"]),
    ("unbound", GREEDY, NEIGHBOUR, (GPU, None), ["no GPU from the binder for fraction-neighbour"]),
]


@pytest.mark.parametrize("greedy, neighbour, gpus, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_missing_enforcement_fails_its_part(greedy, neighbour, gpus, words):
    decisions = [decision("fraction-greedy", gpus[0]), decision("fraction-neighbour", gpus[1])]
    result = st.check_greedy("gpu-node-07", 0.5, decisions, greedy, neighbour, 108, {"greedy": "python3: not found"})
    assert result["check"] == "greedy" and result["title"] == st.CHECK_TITLES["greedy"]
    if words is None:
        assert result["passed"], result["message"]
        assert result["message"] == (
            "the greedy pod asked CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 and sees 54 of 108 SMs, allocated 32358 MiB "
            "within its 40448 MiB cap and was refused 45504 MiB (CUDA_ERROR_OUT_OF_MEMORY); its neighbour sees 54 SMs "
            "and allocated 32358 MiB beside it")
        assert result["gpu"] == GPU and result["evidence"]["expected_multiprocessors"] == 54
        return
    assert not result["passed"]
    for word in words:
        assert word in result["message"], (word, result["message"])


def test_an_unknown_sm_count_is_named():
    decisions = [decision("fraction-greedy"), decision("fraction-neighbour")]
    result = st.check_greedy("gpu-node-07", 0.5, decisions, GREEDY, NEIGHBOUR, None)
    assert not result["passed"] and "unknown SM count of 'NVIDIA A100-SXM4-80GB': set gpu_sm_count" in result["message"]


def test_a_cap_other_than_the_binders_is_a_warning():
    decisions = [decision("fraction-greedy", limit="20000Mi"), decision("fraction-neighbour")]
    result = st.check_greedy("gpu-node-07", 0.5, decisions, GREEDY, NEIGHBOUR, 108)
    assert result["passed"] and "read a cap of 40448 MiB from NVIDIA_GPU_MEMORY_LIMIT, the binder's is 20000 MiB" \
        in result["warnings"][0]


def test_the_rows_show_what_each_pod_saw_and_holds():
    decisions = [decision("fraction-greedy"), decision("fraction-neighbour")]
    rows = st.greedy_rows("gpu-node-07", decisions, UNCAPPED, None)
    assert [(r["pod"], r["sms_seen"], r["memory_seen_mib"], r["memory_cap_mib"]) for r in rows] == [
        ("fraction-greedy", 54, 77862, 40448), ("fraction-neighbour", None, None, 40448)]
    assert any("77862" in line for line in st.table(rows))


PARAMS = {"namespace": "default", "queue": "default-queue", "fraction": 0.5, "node": "gpu-node-07",
          "name_suffix": "gpu-node-07", "runtime_class": "nvidia", "image_pull_secrets": ["login"], "timeout": 180,
          "greedy_neighbour": True, "greedy_image": "registry.example.com/python:3.12-slim"}


def test_the_greedy_pods_only_when_asked():
    assert st.greedy_manifests(dict(PARAMS, greedy_neighbour=False), "gpu-node-07") == []
    greedy, neighbour = st.greedy_manifests(PARAMS, "gpu-node-07")
    assert [greedy["metadata"]["name"], neighbour["metadata"]["name"]] == [
        "fraction-greedy-gpu-node-07", "fraction-neighbour-gpu-node-07"]
    for pod in (greedy, neighbour):
        main = pod["spec"]["containers"][0]
        assert main["image"] == "registry.example.com/python:3.12-slim" and main["name"] == "main"
        assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-07"}
        assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000}
        assert {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"} in main["env"]
        assert pod["metadata"]["labels"][st.RUN_LABEL] == "gpu-node-07"
    command = greedy["spec"]["containers"][0]["command"]
    assert command[:2] == ["python3", "-c"] and command[2] == st.PROBE_SOURCE
    assert command[3:] == ["--role", "greedy", "--hold", "480"]
    assert {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "100"} in greedy["spec"]["containers"][0]["env"]
    assert neighbour["spec"]["containers"][0]["command"] == ["sleep", "480"]
    assert st.probe_command("neighbour")[3:] == ["--role", "neighbour"]
    assert "import ansible" not in st.PROBE_SOURCE and "ansible_collections" not in st.PROBE_SOURCE

# Apache-2.0
"""GPUs of a pool: which nodes count and what pods take."""
from ansible_collections.smshare.kai.plugins.module_utils.gpu_capacity import capacity


def node(name, gpus, ready="True", unschedulable=False, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": ready}]}}


def pod(node_name, gpus, phase="Running", init=0):
    spec = {"nodeName": node_name, "containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}, {}]}
    if init:
        spec["initContainers"] = [{"resources": {"requests": {"nvidia.com/gpu": str(init)}}}]
    return {"spec": spec, "status": {"phase": phase}}


def test_counts_ready_schedulable_gpu_nodes_of_the_pool():
    nodes = [node("a", 8, labels={"pool": "pilot"}), node("b", 4, labels={"pool": "pilot"}),
             node("c", 8, ready="False", labels={"pool": "pilot"}), node("d", 8, unschedulable=True),
             node("e", 0, labels={"pool": "pilot"}), node("f", 2, labels={"pool": "prod"})]
    pods = [pod("a", 2), pod("a", 1, phase="Succeeded"), pod("b", "1", init=3), pod("f", 2), pod(None, 1)]
    result = capacity(nodes, pods, {"pool": "pilot"})
    assert result == {"total": 12, "taken": 5, "free": 7,
                      "nodes": [{"name": "a", "gpus": 8, "taken": 2}, {"name": "b", "gpus": 4, "taken": 3}]}
    assert capacity(nodes, [])["total"] == 14


def test_no_gpus():
    assert capacity([node("a", 0)], []) == {"total": 0, "taken": 0, "free": 0, "nodes": []}

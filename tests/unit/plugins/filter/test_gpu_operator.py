# Apache-2.0
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter.gpu_operator import driver_pod_nodes


def pod(node, image, phase="Running", ready="True", deleting=False):
    meta = {"name": "nvidia-driver-daemonset-" + node}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"image": image}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}


def test_only_ready_pods_of_the_version_count():
    pods = [pod("a", "nvcr.io/nvidia/driver:615.71.09-ubuntu24.04"),
            pod("b", "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04"),
            pod("c", "nvcr.io/nvidia/driver:615.71.09-ubuntu24.04", ready="False"),
            pod("d", "nvcr.io/nvidia/driver:615.71.09-ubuntu24.04", phase="Pending"),
            pod("e", "nvcr.io/nvidia/driver:615.71.09-ubuntu24.04", deleting=True),
            pod("f", "mirror.example.com:5000/nvidia/driver:615.71.09"),
            pod("g", "nvcr.io/nvidia/driver:615.71.099-ubuntu24.04")]
    assert driver_pod_nodes({"resources": pods}, "615.71.09") == ["a", "f"]


def test_refuses_what_is_not_pods():
    with pytest.raises(AnsibleFilterError):
        driver_pod_nodes("pods", "615.71.09")

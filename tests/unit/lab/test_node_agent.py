"""The lab's stand-in node agent: what a Node shows for each stand-in driver state, and
the pod statuses it posts (the parts that need no API server)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab" / "standin" / "node_agent"))

import node_agent as agent  # noqa: E402

HARDWARE = {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "compute_cap": "8.0"}] * 8,
            "nvswitches": 6}
D580 = {"version": "580.95.05", "branch": 580, "cuda_version": "13.0"}
D615 = {"version": "615.71.09", "branch": 615, "cuda_version": "13.4"}


def test_a_loaded_driver_gives_feature_discovery_labels():
    labels = agent.node_labels(D580, D580, HARDWARE)
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.95.05"
    assert labels["nvidia.com/cuda.driver-version.major"] == "580"
    assert labels["nvidia.com/cuda.driver.rev"] == "05"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "13.0"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.family"] == "ampere"
    assert labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert agent.gpu_capacity(D580, HARDWARE) == 8


def test_an_installed_but_not_loaded_upgrade_changes_nothing_until_restart():
    # Library 615 installed, module 580 still loaded: the node still runs 580.
    current = agent.node_labels(D580, D580, HARDWARE)
    assert agent.node_labels(D615, D580, HARDWARE, current=current) == {}
    after_reboot = agent.node_labels(D615, D615, HARDWARE, current=current)
    assert after_reboot["nvidia.com/cuda.driver-version.major"] == "615"
    assert after_reboot["nvidia.com/cuda.runtime-version.full"] == "13.4"


def test_no_driver_loaded_removes_the_driver_labels_and_the_gpus():
    current = agent.node_labels(D580, D580, HARDWARE)
    changes = agent.node_labels(D580, None, HARDWARE, current=current)
    assert changes["nvidia.com/cuda.driver-version.full"] is None
    assert changes["nvidia.com/gpu.count"] is None
    assert "nvidia.com/gpu.present" not in changes          # still a GPU node
    assert agent.gpu_capacity(None, HARDWARE) == 0


def test_the_operator_driver_pod_is_the_driver_of_a_node_without_host_driver():
    pod = {"spec": {"containers": [{"image": "nvcr.io/nvidia/driver:615.71.09-ubuntu24.04"}]}}
    version = agent.driver_from_pod(pod)
    assert version == "615.71.09"
    labels = agent.node_labels(None, None, HARDWARE, operator_driver=version)
    assert labels["nvidia.com/cuda.driver-version.full"] == "615.71.09"
    assert labels["nvidia.com/gpu.deploy.driver"] == "true"
    assert "nvidia.com/cuda.runtime-version.full" not in labels
    assert agent.gpu_capacity(None, HARDWARE, version) == 8


def test_a_users_deploy_driver_false_is_kept():
    labels = agent.node_labels(None, None, HARDWARE, current={"nvidia.com/gpu.deploy.driver": "false"})
    assert "nvidia.com/gpu.deploy.driver" not in labels


POD = {"metadata": {"uid": "0123456789abcdef-0000", "name": "p", "namespace": "ns"},
       "spec": {"containers": [{"name": "main", "image": "img:1"}],
                "initContainers": [{"name": "init", "image": "img:1"}]},
       "status": {"qosClass": "BestEffort"}}


def test_running_status_is_ready_with_started_containers():
    status = agent.pod_running_status(POD, "10.88.0.2", "10.245.1.7", 1700000000, restarts=1)
    assert status["phase"] == "Running" and status["podIP"] == "10.245.1.7"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    main = status["containerStatuses"][0]
    assert main["ready"] and main["started"] and main["restartCount"] == 1 and "running" in main["state"]
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_host_network_pods_have_the_node_ip():
    pod = dict(POD, spec=dict(POD["spec"], hostNetwork=True))
    assert agent.pod_running_status(pod, "10.88.0.2", "10.245.1.7", 1700000000)["podIP"] == "10.88.0.2"


@pytest.mark.parametrize("succeeded, phase, code", [(True, "Succeeded", 0), (False, "Failed", 137)])
def test_finished_status(succeeded, phase, code):
    status = agent.pod_finished_status(POD, 1700000000, succeeded, "Completed")
    assert status["phase"] == phase
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == code


def test_run_seconds_annotation():
    pod = {"metadata": {"annotations": {agent.RUN_SECONDS_ANNOTATION: "2.5"}}}
    assert agent.run_seconds(pod) == 2.5
    assert agent.run_seconds({"metadata": {}}) is None
    assert agent.run_seconds({"metadata": {"annotations": {agent.RUN_SECONDS_ANNOTATION: "soon"}}}) is None

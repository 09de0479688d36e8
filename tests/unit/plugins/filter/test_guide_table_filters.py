# Apache-2.0
"""The filters over module_utils/preflight_rows.py and fractioning_checks.py:
registered names, k8s_info results as input, refusals as AnsibleFilterError."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import fractioning_checks, preflight_rows

NODE = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8"}}}


def test_every_filter_is_registered():
    assert sorted(preflight_rows.FilterModule().filters()) == [
        "mpsd_memory_limit", "preflight_cluster_rows", "preflight_driver_pods", "preflight_driver_rows",
        "preflight_fabric_manager_rows", "preflight_gpu_memory_rows", "preflight_gpu_present_rows",
        "preflight_k3s_rows", "preflight_mps_v3_exec_rows", "preflight_mps_v3_rows", "preflight_mpsd_memory_rows",
        "preflight_runtime_rows", "preflight_verdict"]
    assert sorted(fractioning_checks.FilterModule().filters()) == [
        "fractioning_current_daemonsets", "fractioning_failing_containers", "fractioning_symptoms", "mpsd_startup"]


@pytest.mark.parametrize("nodes", [[NODE], {"resources": [NODE]}], ids=["node-list", "k8s-info-result"])
def test_node_filters_take_a_list_or_a_k8s_info_result(nodes):
    [row] = preflight_rows.preflight_gpu_memory_rows(nodes)
    assert row["status"] == "FAIL" and "gpu-1: missing" in row["found"]
    assert preflight_rows.mpsd_memory_limit(nodes)["gpus"] == 8


@pytest.mark.parametrize("call", [
    lambda: preflight_rows.preflight_gpu_present_rows([NODE], "nvidia.com/gpu.present!=false"),
    lambda: preflight_rows.preflight_gpu_present_rows("not nodes"),
    lambda: preflight_rows.mpsd_memory_limit([NODE], limit="lots"),
    lambda: fractioning_checks.mpsd_startup(42),
    lambda: fractioning_checks.mpsd_startup([], "ten"),
], ids=["set-based-selector", "not-a-list", "unparsable-limit", "not-lines", "percentage-not-a-number"])
def test_refusals_are_filter_errors(call):
    with pytest.raises(AnsibleFilterError):
        call()


def test_mpsd_startup_takes_a_text():
    found = fractioning_checks.mpsd_startup("Adding server 'shared' [multiuser enabled]\n"
                                            "Namespace 'default' on server 'shared': active thread percentage 10\n", 10)
    assert found["multiuser"] and found["default_cap"]


def test_symptoms_take_a_registered_loop_result():
    logs = {"results": [{"item": {"pod": "mpsd-1", "node": "gpu-1", "component": "mpsd", "container": "mpsd"},
                         "log_lines": ["... CUDA_ERROR_OUT_OF_MEMORY ..."]}]}
    [found] = fractioning_checks.fractioning_symptoms(logs, nodes={"resources": [NODE]})
    assert found["symptom"] == "mpsd_out_of_memory" and "gpu-1 has 8 GPUs" in found["message"]


def test_exec_rows_take_a_registered_loop_result():
    [row] = preflight_rows.preflight_mps_v3_exec_rows({"results": []}, managed=True)
    assert row["status"] == "PENDING"

# Apache-2.0
"""The filters over module_utils/preflight_rows.py: registered names, k8s_info
results as input, refusals as AnsibleFilterError."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import preflight_rows

NODE = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8"}}}


def test_every_filter_is_registered():
    assert sorted(preflight_rows.FilterModule().filters()) == [
        "mpsd_memory_limit", "preflight_cluster_rows", "preflight_driver_pods", "preflight_driver_rows",
        "preflight_runtime_rows", "preflight_verdict"]


@pytest.mark.parametrize("nodes", [[NODE], {"resources": [NODE]}], ids=["node-list", "k8s-info-result"])
def test_node_filters_take_a_list_or_a_k8s_info_result(nodes):
    assert preflight_rows.mpsd_memory_limit(nodes)["gpus"] == 8


@pytest.mark.parametrize("call", [
    lambda: preflight_rows.mpsd_memory_limit([NODE], "nvidia.com/gpu.present!=false"),
    lambda: preflight_rows.mpsd_memory_limit("not nodes"),
    lambda: preflight_rows.mpsd_memory_limit([NODE], limit="lots"),
], ids=["set-based-selector", "not-a-list", "unparsable-limit"])
def test_refusals_are_filter_errors(call):
    with pytest.raises(AnsibleFilterError):
        call()

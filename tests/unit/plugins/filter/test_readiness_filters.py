"""The readiness filters take what the roles hand them (k8s_info results, lists) and
refuse what no role means; the rules are tested in
tests/unit/plugins/module_utils/test_readiness.py."""
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import readiness

OBJECTS = json.loads((Path(__file__).parents[1] / "module_utils" / "fixtures" / "readiness" / "objects.json").read_text())


def test_every_filter_is_registered_under_its_function_name():
    filters = readiness.FilterModule().filters()
    assert sorted(filters) == sorted(name for name in filters if getattr(readiness, name) is filters[name])
    assert len(filters) == 3


def test_a_k8s_info_result_or_its_resources_give_the_same_answer():
    pods = [OBJECTS["mpsd_pod_gpu_01"]]
    as_list = readiness.mpsd_pods_gone(pods, "gpu-fractioning", 180)
    assert readiness.mpsd_pods_gone({"resources": pods, "changed": False}, "gpu-fractioning", 180) == as_list
    assert not as_list["ok"] and as_list["message"].startswith("1 mpsd pod(s) still run 180 s")


def test_a_skipped_read_is_no_object():
    assert readiness.mpsd_pods_gone({"skipped": True, "changed": False}, "gpu-fractioning", 180)["ok"]


@pytest.mark.parametrize("call", [
    lambda: readiness.mpsd_pods_gone("pod/mpsd", "ns", 1),
    lambda: readiness.driver_pods_ready("gpu-01", [], "615.71.09", "gpu-operator", 1),
    lambda: readiness.driver_reported(["gpu-01"], "node/gpu-01", "615.71.09"),
])
def test_a_text_where_a_list_belongs_is_refused(call):
    with pytest.raises(AnsibleFilterError, match="expected a list"):
        call()


LOST = {"changed": False, "failed": False, "attempts": 3,
        "msg": "Failed to get client due to HTTPSConnectionPool(host='127.0.0.1', port=6443): Max retries exceeded "
               "with url: /version (Caused by NewConnectionError('Connection refused'))"}


@pytest.mark.parametrize("name, args", [
    ("mpsd_pods_gone", ["gpu-fractioning", 60]),
])
def test_a_wait_whose_last_read_failed_names_the_cluster_not_a_missing_object(name, args):
    predicate = readiness.FilterModule().filters()[name]
    result = predicate(LOST, *args)
    assert result["ok"] is False
    assert result["message"].startswith("The last read of the cluster failed: Failed to get client due to "
                                        "HTTPSConnectionPool"), result["message"]
    assert "check it (kubectl get --raw /readyz), then run again" in result["message"]
    # The same predicate on a read that answered keeps its own words.
    answered = predicate({"resources": [], "failed": False}, *args)
    assert not answered["message"].startswith("The last read"), answered

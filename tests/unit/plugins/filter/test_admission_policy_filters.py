# Apache-2.0
"""The admission policy's filters: what the role reads through them (plugins/filter/admission_policy.py)."""
import pytest
from ansible.errors import AnsibleFilterError
from ansible.parsing.yaml.objects import AnsibleUnicode

from ansible_collections.smshare.kai.plugins.filter import admission_policy as filters
from ansible_collections.smshare.kai.plugins.module_utils import admission_policy as ap

SELECTOR = {"matchLabels": {"smshare.kai/workload-rules": "enforced"}}


def test_the_filters_are_registered():
    assert sorted(filters.FilterModule().filters()) == [
        "admission_policy_objects", "admission_policy_selector_problem", "admission_policy_served"]


def test_objects_take_the_roles_values_as_ansible_gives_them():
    selector = {AnsibleUnicode("matchLabels"): {AnsibleUnicode("team"): AnsibleUnicode("ml")}}
    found = filters.admission_policy_objects(selector, name=AnsibleUnicode("rules"), action=AnsibleUnicode("Deny"))
    assert [(o["kind"], o["metadata"]["name"]) for o in found] == [
        (ap.POLICY_KIND, "rules"), (ap.BINDING_KIND, "rules"),
        (ap.POLICY_KIND, "rules-warnings"), (ap.BINDING_KIND, "rules-warnings")]
    assert found[1]["spec"]["validationActions"] == ["Deny"] and found[3]["spec"]["validationActions"] == ["Warn"]
    assert found[1]["spec"]["matchResources"] == {"namespaceSelector": {"matchLabels": {"team": "ml"}}}


def test_a_bad_value_is_a_filter_error_naming_it():
    with pytest.raises(AnsibleFilterError) as info:
        filters.admission_policy_objects(SELECTOR, action="Audit")
    assert "admission_policy_objects: action: 'Audit' must be one of Warn, Deny" in str(info.value)


@pytest.mark.parametrize("selector, problem", [
    (SELECTOR, ""),
    ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, ""),
    ({}, "must be a label selector"),
    ({"matchLabels": {"a": 1}}, "is not a label value"),
    ("team=ml", "must be a label selector"),
])
def test_the_selector_problem(selector, problem):
    found = filters.admission_policy_selector_problem(selector)
    assert (found == "") if not problem else (problem in found)


def test_served_reads_k8s_cluster_info():
    info = {"apis": {"admissionregistration.k8s.io/v1": {"ValidatingWebhookConfiguration": {}}},
            "version": {"server": {"kubernetes": {"gitVersion": "v1.20.2", "major": "1", "minor": "20"}}}}
    result = filters.admission_policy_served(info)
    assert result["ok"] is False and result["message"].startswith("Kubernetes v1.20.2 does not serve")

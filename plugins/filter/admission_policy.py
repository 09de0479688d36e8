# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters of the admission policy (documentation: admission_policy_objects.yml,
admission_policy_selector_problem.yml and admission_policy_served.yml beside this file).
The engine is module_utils/admission_policy.py, which builds the policy from the rule
table of module_utils/workload_rules.py (the module and filter workload_lint's)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import admission_policy as _policy
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain


def admission_policy_objects(namespace_selector, name=_policy.DEFAULT_NAME, action="Warn", failure_policy="Fail"):
    """The ValidatingAdmissionPolicy objects and their bindings (error rules, then warning rules)."""
    try:
        return _policy.objects(name=_plain(name), action=_plain(action), namespace_selector=_plain(namespace_selector),
                               failure_policy=_plain(failure_policy))
    except _policy.BadInput as exc:
        raise AnsibleFilterError("admission_policy_objects: %s: %s" % (exc.parameter, exc.msg))


def admission_policy_selector_problem(namespace_selector):
    """What the API would refuse in the namespace selector, or '' when it is a valid one."""
    try:
        _policy.check_selector(_plain(namespace_selector))
    except _policy.BadInput as exc:
        return exc.msg
    return ""


def admission_policy_served(cluster_info):
    """{ok, version, message}: whether the cluster serves admissionregistration.k8s.io/v1 policies."""
    return _policy.served(_plain(cluster_info))


class FilterModule(object):
    def filters(self):
        return {
            "admission_policy_objects": admission_policy_objects,
            "admission_policy_selector_problem": admission_policy_selector_problem,
            "admission_policy_served": admission_policy_served,
        }

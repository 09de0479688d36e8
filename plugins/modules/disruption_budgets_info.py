#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: disruption_budgets_info
short_description: Name the PodDisruptionBudgets a node's drain would violate, waiting up to a timeout for them to allow it
version_added: 0.1.0
description:
  - "Reads the pods on a node and the cluster's PodDisruptionBudgets (C(policy/v1), or C(policy/v1beta1) where the
    API server serves only that, before Kubernetes 1.21), and returns as RV(blocks) each budget that would refuse
    an eviction of the node's pods now (the API server answers 429 and a drain waits for good), with its pods."
  - "A pod the drain would not evict through the Eviction API (a DaemonSet's, a static one, a finished one,
    KAI's reservation pods, bare pods unless O(force)) is not weighed; a pod under two budgets is a row of its
    own, since the Eviction API refuses it whatever they allow."
  - "With O(timeout), reads again every O(poll_interval) seconds until no budget blocks or the timeout ends, in
    one module run; RV(waited) says how long it waited. A budget still blocking at the end is a result
    (RV(ok) false, RV(message)), not a failure: the caller decides what it means."
  - "The P(smshare.kai.driver_upgrade#role) role asks it before a node is cordoned (a node a budget blocks is
    left as it is) and when a drain was refused."
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
  - smshare.kai.cluster_access
options:
  node:
    description: The Node whose pods the drain would evict.
    type: str
    required: true
  pod_selectors:
    description:
      - Label selectors the drain is limited to, as C(kubernetes.core.k8s_drain)'s C(pod_selectors)
        (C(app=web), C(tier!=batch)); only the pods they select are weighed. Empty, every pod on the node.
    type: list
    elements: str
    default: []
  force:
    description: Whether the drain deletes bare pods too (C(kubernetes.core.k8s_drain)'s C(delete_options.force)); they are then weighed.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for no budget to block; V(0) reads once.
    type: int
    default: 0
  poll_interval:
    description: Seconds between two reads while waiting.
    type: int
    default: 5
requirements:
  - kubernetes (Python library)
seealso:
  - module: smshare.kai.rollout_wait_info
"""

EXAMPLES = r"""
- name: Wait up to five minutes for the budgets to allow the drain of gpu-01
  smshare.kai.disruption_budgets_info:
    node: gpu-01
    timeout: 300
  register: budgets

- name: Leave gpu-01 alone while a budget blocks it
  ansible.builtin.debug:
    msg: "{{ budgets.message }}"
  when: not budgets.ok
"""

RETURN = r"""
ok:
  description: Whether no budget blocks the drain (at the last read).
  returned: success
  type: bool
blocks:
  description: >-
    The budgets that block it, as rows of namespace, name, allowed (the disruptions the budget allows now),
    pods (C(namespace/name) of the node's pods it guards) and text (the row as one sentence).
  returned: success
  type: list
  elements: dict
message:
  description: The blocks as one text; empty when none.
  returned: success
  type: str
api_version:
  description: The API the budgets were read from, C(policy/v1) or C(policy/v1beta1); empty when neither is served.
  returned: success
  type: str
waited:
  description: Seconds spent waiting for the budgets (0 when the first read found none blocking).
  returned: success
  type: float
failure:
  description: Name of the failure, bad_input (with RV(parameter)), missing_library or cluster.
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, drain, validate
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException

try:
    from kubernetes.dynamic import DynamicClient
except ImportError:  # cluster_access.require_library() reports it
    DynamicClient = None

# Newest first: policy/v1beta1 is the only one before Kubernetes 1.21 and gone from 1.25.
BUDGET_APIS = ("policy/v1", "policy/v1beta1")


class BudgetReads:
    """The module's reads, as the API's JSON: plain calls where the client makes
    them itself, the dynamic client with older kubernetes libraries."""

    def __init__(self, client):
        self.client = client
        self.plain = cluster_access.plain_calls(client)
        self.dynamic = None if self.plain else DynamicClient(client)

    def _get(self, path, query=None):
        return cluster_access.plain_get(self.client, path, query)

    def budget_api(self):
        """The first of BUDGET_APIS the API server serves PodDisruptionBudgets from; '' when none."""
        for api in BUDGET_APIS:
            if self.plain:
                try:
                    served = self._get("/apis/%s" % api).get("resources") or []
                except ApiException as exc:
                    if exc.status == 404:
                        continue
                    raise
                if any(r.get("kind") == "PodDisruptionBudget" for r in served):
                    return api
            else:
                try:
                    self.dynamic.resources.get(api_version=api, kind="PodDisruptionBudget")
                    return api
                except Exception:  # pylint: disable=broad-except
                    continue    # the dynamic client's ResourceNotFoundError: not served there
        return ""

    def pods(self, node, label_selector):
        query = {"fieldSelector": "spec.nodeName=%s" % node}
        if label_selector:
            query["labelSelector"] = label_selector
        if self.plain:
            return self._get("/api/v1/pods", query).get("items") or []
        pods = self.dynamic.resources.get(api_version="v1", kind="Pod")
        return pods.get(field_selector=query["fieldSelector"], label_selector=label_selector,
                        _request_timeout=cluster_access.REQUEST_TIMEOUT).to_dict().get("items") or []

    def budgets(self, api):
        """Every budget in the cluster, each with its apiVersion (a list's items carry none)."""
        if self.plain:
            items = self._get("/apis/%s/poddisruptionbudgets" % api).get("items") or []
        else:
            resource = self.dynamic.resources.get(api_version=api, kind="PodDisruptionBudget")
            items = resource.get(_request_timeout=cluster_access.REQUEST_TIMEOUT).to_dict().get("items") or []
        return [dict(item, apiVersion=api) for item in items]


def blocks_now(reads, api, params):
    if not api:     # no budget API: nothing can refuse an eviction
        return []
    pods = reads.pods(params["node"], ",".join(params["pod_selectors"]))
    return drain.budget_blocks(reads.budgets(api), pods, params["node"], params["force"])


def run(params, reads, clock=time.monotonic, sleep=time.sleep):
    """Read, and read again while a budget blocks and the timeout allows; the result's fields."""
    api = reads.budget_api()

    def step():
        blocks = blocks_now(reads, api, params)
        return blocks, not blocks
    blocks, waited = cluster_access.poll(step, params["timeout"], params["poll_interval"], clock, sleep)
    return dict(changed=False, ok=not blocks, blocks=blocks, api_version=api, waited=waited,
                message="; ".join(row["text"] for row in blocks))


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    validate.node_name("node", params["node"])
    validate.integer("timeout", params["timeout"], example="300 (seconds; 0 reads once)", minimum=0)
    validate.integer("poll_interval", params["poll_interval"], example="5 (seconds)", minimum=1)
    for selector in params["pod_selectors"]:
        validate.text("pod_selectors", selector.strip(), example="app=web")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            node=dict(type="str", required=True),
            pod_selectors=dict(type="list", elements="str", default=[]),
            force=dict(type="bool", default=False),
            timeout=dict(type="int", default=0),
            poll_interval=dict(type="int", default=5),
        ),
        supports_check_mode=True,
    )
    params = module.params
    cluster_access.require_library(module)
    validate.refuse_bad_input(module, check_input)
    try:
        result = run(params, BudgetReads(cluster_access.api_client(params["kubeconfig"], params["context"])))
    except cluster_access.AccessError as exc:
        module.fail_json(msg=str(exc), failure="cluster")
    except ApiException as exc:
        module.fail_json(msg="reading the pods on %s or the PodDisruptionBudgets failed: %s %s" % (
            params["node"], exc.status, exc.reason), failure="cluster")
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="reading the pods on %s or the PodDisruptionBudgets failed: %s" % (params["node"], exc),
                         failure="cluster")
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rollout_wait_info
short_description: Wait, in one module run, for a node of a driver rollout to reach what its next step needs
version_added: 0.1.0
description:
  - "The waits of the P(smshare.kai.driver_upgrade#role) role's rollout: reads the Node and, for the
    fractioning agents' checks, their pods on it, every O(poll_interval) seconds until each of O(checks) holds
    or O(timeout) ends; one module run, where each read was a module run of its own."
  - "The checks are the role's rules (C(module_utils/driver_upgrade.py)), each a result of ok, rows (what it saw)
    and message (what is wrong and what to do, naming the role's variables):
    V(node_ready), the Node Ready and its O(driver_label) on O(branch);
    V(agents_left), no fractioning agent pod left on the node;
    V(agents_back), at least O(agents_expected) of them Running and Ready;
    V(agent_condition), the Node's O(condition) True;
    V(gpu_pods_gone), no pod bound to the node that holds a GPU (the C(nvidia.com/gpu) resource, KAI's
    fraction annotations, the binder's C(gpus.devices), reservation pods): the node's pods come back as RV(pods)."
  - "A check not met at the end is a result (RV(ok) false, RV(message)), not a failure; a read the API server
    did not answer is retried until the timeout, and fails the module (RV(failure=cluster)) only when the last
    read did not get an answer."
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
  - smshare.kai.cluster_access
options:
  node:
    description: The Node's name.
    type: str
    required: true
  checks:
    description: What must hold, all of it at one read.
    type: list
    elements: str
    choices: [node_ready, agents_left, agents_back, agent_condition, gpu_pods_gone]
    required: true
  timeout:
    description: Seconds to wait for the checks to hold; V(0) reads once. Named in the messages.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two reads.
    type: int
    default: 2
  branch:
    description: The driver branch the node must report (V(node_ready)).
    type: str
  driver_label:
    description: The Node label that reports the loaded driver's branch (V(node_ready)); empty, the branch is not read.
    type: str
    default: nvidia.com/cuda.driver-version.major
  agent_namespace:
    description: The fractioning agents' namespace (V(agents_left), V(agents_back)).
    type: str
    default: gpu-fractioning
  agent_selector:
    description: The label selector of the fractioning agents' pods (V(agents_left), V(agents_back)).
    type: str
    default: app.kubernetes.io/component in (mpsd,fractiond)
  agents_expected:
    description: How many agent pods must be back and Ready (V(agents_back)).
    type: int
    default: 0
  condition:
    description: The Node condition the agents set (V(agent_condition)).
    type: str
    default: gpu-fractioning.nvidia.com/Ready
  state_label:
    description: The label whose value keeps the agents off the node, named in V(agents_left)'s message.
    type: str
    default: nvidia.com/gpu-driver-upgrade-state
requirements:
  - kubernetes (Python library)
seealso:
  - module: smshare.kai.node_state
"""

EXAMPLES = r"""
- name: Wait up to ten minutes for gpu-01 to be Ready on branch 615
  smshare.kai.rollout_wait_info:
    node: gpu-01
    checks: [node_ready]
    branch: "615"
    timeout: 600
  register: ready

- name: Check it is
  ansible.builtin.assert:
    that: ready.ok
    fail_msg: "{{ ready.message }}"
"""

RETURN = r"""
ok:
  description: Whether every check held at the last read.
  returned: success
  type: bool
message:
  description: The messages of the checks that do not hold, one after the other; empty when all do.
  returned: success
  type: str
check_results:
  description: Each check's result at the last read, by its name, with ok, rows (what it saw) and message.
  returned: success
  type: dict
node:
  description: The Node as last read (the API's JSON); empty when no check reads it or it is gone.
  returned: success
  type: dict
pods:
  description: Every pod bound to the node as last read (the API's JSON), for V(gpu_pods_gone); empty otherwise.
  returned: success
  type: list
  elements: dict
waited:
  description: Seconds spent waiting (0 when the first read met every check).
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

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, validate
from ansible_collections.smshare.kai.plugins.module_utils import driver_upgrade as rules
from ansible_collections.smshare.kai.plugins.module_utils import gpu_holders
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException, kube_client as kclient

NODE_CHECKS = ("node_ready", "agent_condition")
AGENT_CHECKS = ("agents_left", "agents_back")
POD_CHECKS = ("gpu_pods_gone",)


class NodeReads:
    """The reads, as the API's JSON: plain calls where the client makes them
    itself, CoreV1Api with older kubernetes libraries."""

    def __init__(self, client):
        self.client = client
        self.core = None if cluster_access.plain_calls(client) else kclient.CoreV1Api(client)

    def _ask(self, what, plain, typed):
        try:
            if self.core is None:
                return plain()
            return self.client.sanitize_for_serialization(typed())
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise cluster_access.Unanswered("reading %s: %s %s" % (what, exc.status, exc.reason))
        except Exception as exc:  # pylint: disable=broad-except
            raise cluster_access.Unanswered("reading %s: %s" % (what, exc))

    def node(self, name):
        """The Node, None when it is gone."""
        return self._ask("Node %s" % name,
                         lambda: cluster_access.plain_json(self.client, "GET", "/api/v1/nodes/%s" % name),
                         lambda: self.core.read_node(name, _request_timeout=cluster_access.REQUEST_TIMEOUT))

    def pods(self, namespace, selector, node):
        field = "spec.nodeName=%s" % node
        found = self._ask("the pods of %s on %s" % (selector, node),
                          lambda: cluster_access.plain_get(self.client, "/api/v1/namespaces/%s/pods" % namespace,
                                                           {"labelSelector": selector, "fieldSelector": field}),
                          lambda: self.core.list_namespaced_pod(namespace, label_selector=selector, field_selector=field,
                                                                _request_timeout=cluster_access.REQUEST_TIMEOUT))
        return (found or {}).get("items") or []

    def node_pods(self, node):
        """Every pod bound to the node, in every namespace."""
        field = "spec.nodeName=%s" % node
        found = self._ask("the pods on %s" % node,
                          lambda: cluster_access.plain_get(self.client, "/api/v1/pods", {"fieldSelector": field}),
                          lambda: self.core.list_pod_for_all_namespaces(
                              field_selector=field, _request_timeout=cluster_access.REQUEST_TIMEOUT))
        return (found or {}).get("items") or []


def evaluate(params, node, pods, node_pods=None, unanswered=""):
    """Each check's result on one read: node the Node (None: gone), pods the agents' and
    node_pods all the node's (None: unread)."""
    nodes = [node] if node else []
    timeout = params["timeout"]
    pods_read = {"resources": node_pods} if node_pods is not None else {"msg": unanswered or "not read"}
    rules_for = {
        "node_ready": lambda: rules.node_ready(nodes, params["node"], params["branch"], params["driver_label"], timeout),
        "agents_left": lambda: rules.agents_left(pods, timeout, params["state_label"]),
        "agents_back": lambda: rules.agents_back(pods, params["agents_expected"], timeout),
        "agent_condition": lambda: rules.agent_condition(nodes, params["condition"], timeout),
        "gpu_pods_gone": lambda: rules.gpu_holders(pods_read, None, gpu_holders.holding_pods(node_pods or [], params["node"]),
                                                   timeout),
    }
    return {check: {key: value for key, value in rules_for[check]().items() if key != "done"}
            for check in params["checks"]}


def read_once(params, reads):
    """(node, pods, node_pods, unanswered): what one read of the cluster gave."""
    node = pods = node_pods = None
    checks = params["checks"]
    try:
        if any(check in NODE_CHECKS for check in checks):
            node = reads.node(params["node"])
        if any(check in AGENT_CHECKS for check in checks):
            pods = reads.pods(params["agent_namespace"], params["agent_selector"], params["node"])
        if any(check in POD_CHECKS for check in checks):
            node_pods = reads.node_pods(params["node"])
    except cluster_access.Unanswered as exc:
        return node, pods, node_pods, str(exc)
    return node, pods, node_pods, ""


def run(params, reads, clock=time.monotonic, sleep=time.sleep):
    def step():
        node, pods, node_pods, unanswered = read_once(params, reads)
        results = evaluate(params, node, pods, node_pods, unanswered)
        ok = not unanswered and all(result["ok"] for result in results.values())
        return (node, node_pods, unanswered, results, ok), ok
    (node, node_pods, unanswered, results, ok), waited = cluster_access.poll(
        step, params["timeout"], params["poll_interval"], clock, sleep)
    return dict(changed=False, ok=ok, check_results=results, node=node or {}, pods=node_pods or [], waited=waited,
                unanswered=unanswered,
                message=" ".join(r["message"].rstrip(".") + "." for r in results.values() if not r["ok"]))


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    validate.node_name("node", params["node"])
    if not params["checks"]:
        raise validate.BadInput("checks", params["checks"], "must name at least one check", "[node_ready]")
    validate.integer("timeout", params["timeout"], example="300 (seconds; 0 reads once)", minimum=0)
    validate.integer("poll_interval", params["poll_interval"], example="2 (seconds)", minimum=1)
    if "node_ready" in params["checks"]:
        validate.text("branch", params["branch"], example="615")
        if params["driver_label"]:
            validate.qualified_name("driver_label", params["driver_label"], example="nvidia.com/cuda.driver-version.major")
    if any(check in AGENT_CHECKS for check in params["checks"]):
        validate.namespace("agent_namespace", params["agent_namespace"], example="gpu-fractioning")
        validate.text("agent_selector", params["agent_selector"], example="app.kubernetes.io/component in (mpsd,fractiond)")
        validate.qualified_name("state_label", params["state_label"], example="nvidia.com/gpu-driver-upgrade-state")
    if "agents_back" in params["checks"]:
        validate.integer("agents_expected", params["agents_expected"], example="2", minimum=0)
    if "agent_condition" in params["checks"]:
        validate.qualified_name("condition", params["condition"], example="gpu-fractioning.nvidia.com/Ready")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            node=dict(type="str", required=True),
            checks=dict(type="list", elements="str", required=True, choices=list(NODE_CHECKS + AGENT_CHECKS + POD_CHECKS)),
            timeout=dict(type="int", default=300),
            poll_interval=dict(type="int", default=2),
            branch=dict(type="str"),
            driver_label=dict(type="str", default="nvidia.com/cuda.driver-version.major"),
            agent_namespace=dict(type="str", default="gpu-fractioning"),
            agent_selector=dict(type="str", default="app.kubernetes.io/component in (mpsd,fractiond)"),
            agents_expected=dict(type="int", default=0),
            condition=dict(type="str", default="gpu-fractioning.nvidia.com/Ready"),
            state_label=dict(type="str", default=rules.STATE_LABEL),
        ),
        supports_check_mode=True,
    )
    params = module.params
    cluster_access.require_library(module)
    validate.refuse_bad_input(module, check_input)
    try:
        result = run(params, NodeReads(cluster_access.api_client(params["kubeconfig"], params["context"])))
    except cluster_access.AccessError as exc:
        module.fail_json(msg=str(exc), failure="cluster")
    unanswered = result.pop("unanswered")
    if unanswered:
        module.fail_json(msg="Waiting for %s on %s: the API server did not answer the last read before the timeout "
                             "(%s s): %s" % (", ".join(params["checks"]), params["node"], params["timeout"], unanswered),
                         failure="cluster", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_cluster_info
short_description: Read what a GPU cluster's preflight needs from the API server in one run
version_added: 0.1.0
description:
  - "Asks and reads, in one module run: whether the kubeconfig's identity may create each resource of
    O(access) in all namespaces (a C(SelfSubjectAccessReview) each), the RuntimeClass O(runtime_class), the
    nodes O(gpu_node_selector) selects and every node, and every Deployment and DaemonSet of the cluster (the
    GPU stack's versions are read from their images)."
  - "Each answer has the shape the kubernetes.core task that read it before returned (C(k8s) in a loop,
    C(k8s_info)), so the preflight role's rows read them unchanged: a read the API server refused is
    C({msg}) for that read alone, and the others go on. A kubeconfig that gives no client is such an answer
    for every read, not a failure of the module: the rows name it."
  - "Read-only: a review is a question, not a change, so it runs in check mode too."
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.cluster_access
attributes:
  check_mode:
    support: full
    details: Reads and asks only, in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  access:
    description: The resources to ask about, each C(resource) (a plural name, or C(*)) and C(group) (C("") for the core group); the verb is C(create).
    type: list
    elements: dict
    default: []
  runtime_class:
    description: The RuntimeClass to read; empty reads none.
    type: str
    default: ""
  gpu_node_selector:
    description: The label selector of the GPU nodes.
    type: str
    default: nvidia.com/gpu.present=true
"""

EXAMPLES = r"""
- name: Read the cluster for the preflight rows
  smshare.kai.gpu_cluster_info:
    access:
      - {resource: customresourcedefinitions, group: apiextensions.k8s.io}
      - {resource: namespaces, group: ""}
    runtime_class: nvidia
  register: cluster
"""

RETURN = r"""
access:
  description: C(results), one per O(access) entry, each C(item) (the entry) and C(result) (the review with its C(status)), or C(msg).
  returned: success
  type: dict
runtime_class:
  description: C(resources) (the RuntimeClass, or none when missing), or C(msg) when the read failed.
  returned: success
  type: dict
nodes:
  description: C(resources), the nodes O(gpu_node_selector) selects, or C(msg).
  returned: success
  type: dict
all_nodes:
  description: C(resources), every node, or C(msg).
  returned: success
  type: dict
workloads:
  description: C(results), the Deployments then the DaemonSets of every namespace, each C(item) (the kind) and C(resources), or C(msg).
  returned: success
  type: dict
failure:
  description: >-
    Why the module failed - C(bad_input) (with RV(parameter)) or C(missing_library). An API server that
    does not answer is no failure: each read says so in its C(msg).
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, plain, validate
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException, kube_client as kclient

REQUEST_TIMEOUT = cluster_access.REQUEST_TIMEOUT


def _why(exc):
    """A failed request in the words k8s_info's message would use."""
    if isinstance(exc, ApiException):
        return plain.one_line("%s %s: %s" % (exc.status, exc.reason, exc.body or ""))
    return plain.one_line(exc)


def _raw(call, *args, **kwargs):
    """The API's JSON as it sent it (k8s_info's shape: its field names and times)."""
    response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    return json.loads(response.data)


def _listed(call, *args, **kwargs):
    try:
        return {"resources": _raw(call, *args, **kwargs).get("items") or []}
    except Exception as exc:  # pylint: disable=broad-except
        return {"msg": "listing failed: %s" % _why(exc)}


def review(authz, item):
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "create", "resource": item["resource"],
                                            "group": item.get("group") or ""}}}
    try:
        return {"item": item, "result": _raw(authz.create_self_subject_access_review, body)}
    except Exception as exc:  # pylint: disable=broad-except
        return {"item": item, "msg": "the review failed: %s" % _why(exc)}


def runtime_class(node_api, name):
    try:
        return {"resources": [_raw(node_api.read_runtime_class, name)]}
    except ApiException as exc:
        if exc.status == 404:
            return {"resources": []}
        return {"msg": "reading RuntimeClass %s failed: %s" % (name, _why(exc))}
    except Exception as exc:  # pylint: disable=broad-except
        return {"msg": "reading RuntimeClass %s failed: %s" % (name, _why(exc))}


def unreachable(params, why):
    """Every answer, each the failure: no client could be made (the rows name it)."""
    failed = {"msg": why}
    found = {"access": {"results": [{"item": item, "msg": why} for item in params["access"]]},
             "nodes": failed, "all_nodes": failed,
             "workloads": {"results": [dict(failed, item="Deployment"), dict(failed, item="DaemonSet")]}}
    if params["runtime_class"]:
        found["runtime_class"] = failed
    return found


def read(api, params):
    core, apps = kclient.CoreV1Api(api), kclient.AppsV1Api(api)
    found = {
        "access": {"results": [review(kclient.AuthorizationV1Api(api), item) for item in params["access"]]},
        "nodes": _listed(core.list_node, label_selector=params["gpu_node_selector"]),
        "all_nodes": _listed(core.list_node),
        "workloads": {"results": [dict(_listed(apps.list_deployment_for_all_namespaces), item="Deployment"),
                                  dict(_listed(apps.list_daemon_set_for_all_namespaces), item="DaemonSet")]},
    }
    if params["runtime_class"]:
        found["runtime_class"] = runtime_class(kclient.NodeV1Api(api), params["runtime_class"])
    return found


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    for index, item in enumerate(params["access"]):
        name = "access[%d]" % index
        validate.text(name + ".resource", item.get("resource"), example="customresourcedefinitions",
                      pattern=r"[a-z0-9.-]+|\*", rule="must be a resource's plural name (lower case) or *")
        validate.text(name + ".group", item.get("group") or "", example="apiextensions.k8s.io ('' for core)",
                      pattern=r"[a-z0-9.-]*", rule="must be an API group (lower case)", required=False)
    validate.text("runtime_class", params["runtime_class"], example="nvidia", required=False,
                  pattern=r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", rule="must be a RuntimeClass name")
    validate.text("gpu_node_selector", params["gpu_node_selector"], example="nvidia.com/gpu.present=true")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            access=dict(type="list", elements="dict", default=[]),
            runtime_class=dict(type="str", default=""),
            gpu_node_selector=dict(type="str", default="nvidia.com/gpu.present=true"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    cluster_access.require_library(module)
    validate.refuse_bad_input(module, check_input)
    try:
        found = read(cluster_access.api_client(params["kubeconfig"], params["context"]), params)
    except cluster_access.AccessError as exc:
        found = unreachable(params, str(exc))
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()

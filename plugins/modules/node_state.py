#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_state
short_description: Set a Node's labels, annotations and cordon in one patch, and record why as an Event on it
version_added: 0.1.0
description:
  - "Reads the Node, and patches (a JSON merge patch) only the labels, annotations and C(spec.unschedulable)
    that differ from what is asked: a Node already in that state is left alone."
  - "With O(event), also writes an Event on the Node (C(kubectl describe node) shows it), as the kubelet does
    for its own: C(involvedObject) the Node, its C(uid) the Node's name. The Event is a record for people: one
    that cannot be written is a warning (RV(event_error)), never a failure, and the Node's change stands."
  - "One module run for what took a C(kubernetes.core.k8s) patch and a second one for the Event: the driver
    rollout enters about seven states per node."
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.cluster_access
attributes:
  check_mode:
    support: full
    details: Reads the Node and says what would change; writes neither the Node nor the Event.
  diff_mode:
    support: full
    details: The labels, annotations and C(unschedulable) asked for, before and after.
  idempotent:
    support: partial
    details: The Node is patched only where it differs; an Event asked for is written on every run (a new record).
options:
  name:
    description: The Node's name.
    type: str
    required: true
  labels:
    description:
      - Labels to set; a null value removes the label. Labels not named are left as they are.
      - A number is set as its text.
    type: dict
    default: {}
  annotations:
    description: Annotations to set; a null value removes the annotation. Annotations not named are left as they are.
    type: dict
    default: {}
  unschedulable:
    description: C(true) cordons the Node, C(false) uncordons it; unset leaves it as it is.
    type: bool
  event:
    description: An Event to record on the Node after its change.
    type: dict
    suboptions:
      reason:
        description: The Event's reason, one CamelCase word (C(kubectl get events) shows it).
        type: str
        required: true
      note:
        description:
          - What happened, for people (the Event's C(message)); control characters become spaces, and it is cut to
            1000 characters.
          - Named as C(events.k8s.io/v1) names it; C(message) is a name Ansible keeps for itself.
        type: str
        required: true
      type:
        description: The Event's type.
        type: str
        choices: [Normal, Warning]
        default: Normal
      component:
        description: The Event's source component.
        type: str
        default: smshare.kai
requirements:
  - kubernetes (Python library)
"""

EXAMPLES = r"""
- name: Cordon the node and say why
  smshare.kai.node_state:
    name: gpu-node-1
    labels:
      smshare.kai/driver-upgrade-state: cordon-required
    unschedulable: true
    event:
      reason: DriverUpgrade
      note: "cordon-required: cordoned for the driver upgrade"

- name: Uncordon it and clear an annotation
  smshare.kai.node_state:
    name: gpu-node-1
    annotations:
      smshare.kai/driver-upgrade-target: null
    unschedulable: false
"""

RETURN = r"""
labels:
  description: The Node's labels after the change (or, in check mode, as they would be).
  returned: success
  type: dict
annotations:
  description: The Node's annotations after the change (or, in check mode, as they would be).
  returned: success
  type: dict
unschedulable:
  description: Whether the Node is cordoned after the change.
  returned: success
  type: bool
patched:
  description: Whether the Node was (in check mode, would be) patched.
  returned: success
  type: bool
event:
  description: The name of the Event written; empty when none was asked for, in check mode, or when it could not be written.
  returned: success
  type: str
event_error:
  description: Why the Event asked for could not be written; the Node's change stands.
  returned: when the Event was not written
  type: str
failure:
  description: Why it failed - C(node_missing), C(cluster), C(bad_input), C(missing_library).
  returned: failure
  type: str
"""

import datetime
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, validate
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException, kube_client as kclient


# A label value as the API validates it: empty, or at most 63 of these, alphanumeric at both ends.
LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
REASON_RE = r"[A-Z][A-Za-z0-9]*"
MESSAGE_LIMIT = 1000


def plan(current, labels, annotations, unschedulable):
    """The merge patch that brings `current` ({labels, annotations, unschedulable}) to what is asked
    (None values remove a key; unschedulable None leaves it), and the state after it.
    Returns (patch or None, after)."""
    patch, after = {}, {}
    for field in ("labels", "annotations"):
        have = dict(current.get(field) or {})
        wanted = labels if field == "labels" else annotations
        delta = {key: value for key, value in wanted.items() if have.get(key) != value and (value is not None or key in have)}
        for key, value in delta.items():
            if value is None:
                have.pop(key, None)
            else:
                have[key] = value
        after[field] = have
        if delta:
            patch.setdefault("metadata", {})[field] = delta
    after["unschedulable"] = bool(current.get("unschedulable"))
    if unschedulable is not None and bool(unschedulable) != after["unschedulable"]:
        patch["spec"] = {"unschedulable": bool(unschedulable)}
        after["unschedulable"] = bool(unschedulable)
    return patch or None, after


def diff(current, after, labels, annotations, unschedulable):
    """Before and after of the keys asked for only: the rest of the Node is not this module's."""
    def part(state):
        shown = {"labels": {k: (state["labels"] or {}).get(k) for k in labels},
                 "annotations": {k: (state["annotations"] or {}).get(k) for k in annotations}}
        if unschedulable is not None:
            shown["unschedulable"] = bool(state.get("unschedulable"))
        return shown
    return {"before": part(current), "after": part(after)}


def event_body(node, event):
    # Text for people: a reason carried over from a failure may hold line breaks or other control characters.
    message = validate.CONTROL_RE.sub(" ", event["note"])
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT - 3] + "..."
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": node + ".", "namespace": "default"},
        # kubectl describe node matches its events on the Node's name as uid (the kubelet's convention).
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": event["reason"], "message": message, "type": event["type"],
        "source": {"component": event["component"]},
        "count": 1,
    }


def _stamp(body):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body.update(firstTimestamp=now, lastTimestamp=now)
    return body


class NodeCalls:
    """The module's three calls, with dicts: plain JSON where the client makes
    calls itself (no typed API to import), CoreV1Api with older libraries."""

    def __init__(self, client):
        self.client = client
        self.core = None if cluster_access.plain_calls(client) else kclient.CoreV1Api(client)

    def read(self, name):
        if self.core is None:
            found = cluster_access.plain_json(self.client, "GET", "/api/v1/nodes/%s" % name)
            meta, spec = found.get("metadata") or {}, found.get("spec") or {}
            return {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
                    "unschedulable": bool(spec.get("unschedulable"))}
        found = self.core.read_node(name, _request_timeout=cluster_access.REQUEST_TIMEOUT)
        return {"labels": found.metadata.labels or {}, "annotations": found.metadata.annotations or {},
                "unschedulable": bool(found.spec.unschedulable) if found.spec else False}

    def patch(self, name, body):
        if self.core is None:
            cluster_access.plain_json(self.client, "PATCH", "/api/v1/nodes/%s" % name, body,
                                      content_type="application/merge-patch+json")
        else:   # older libraries send a dict as a strategic merge patch: the same for labels, annotations and a bool
            self.core.patch_node(name, body, _request_timeout=cluster_access.REQUEST_TIMEOUT)

    def create_event(self, body):
        if self.core is None:
            return cluster_access.plain_json(self.client, "POST", "/api/v1/namespaces/default/events", body)["metadata"]["name"]
        return self.core.create_namespaced_event("default", body, _request_timeout=cluster_access.REQUEST_TIMEOUT).metadata.name


def run(module, calls):
    params = module.params
    name = params["name"]
    try:
        current = calls.read(name)
    except ApiException as exc:
        if exc.status == 404:
            module.fail_json(msg="Node %s is not in the cluster: nothing was changed. Check the node's name (kubectl get "
                             "nodes) against the inventory." % name, failure="node_missing")
        raise
    patch, after = plan(current, params["labels"], params["annotations"], params["unschedulable"])
    result = dict(changed=patch is not None, patched=patch is not None, event="", **after)
    if module._diff:
        result["diff"] = diff(current, after, params["labels"], params["annotations"], params["unschedulable"])
    if module.check_mode:
        result["changed"] = result["changed"] or bool(params["event"])
        return result
    if patch is not None:
        calls.patch(name, patch)
    if params["event"]:
        try:
            written = calls.create_event(_stamp(event_body(name, params["event"])))
        except Exception as exc:  # pylint: disable=broad-except
            # A record for people: the Node's change stands whatever becomes of it.
            text = "%s %s" % (exc.status, exc.reason) if isinstance(exc, ApiException) else str(exc)
            result["event_error"] = "the Event on Node %s could not be written: %s" % (name, text)
            module.warn(result["event_error"])
        else:
            result.update(changed=True, event=written)
    return result


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    validate.node_name("name", params["name"])
    for field in ("labels", "annotations"):
        for key, value in params[field].items():
            validate.qualified_name("%s key" % field, key, example="smshare.kai/driver-upgrade-state")
            if value is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = params[field][key] = str(value)     # a branch or a count templated as a number
            if not isinstance(value, str):
                raise validate.BadInput("%s[%s]" % (field, key), value, "must be a string or null (null removes it)",
                                        "'615'")
            if field == "labels" and (len(value) > 63 or not LABEL_VALUE_RE.fullmatch(value)):
                raise validate.BadInput("labels[%s]" % key, value, "must be a label value: at most 63 letters, digits, "
                                        "'-', '_' or '.', starting and ending with a letter or digit", "upgrade-done")
    event = params["event"]
    if event:
        validate.text("event.reason", event["reason"], example="DriverUpgrade", pattern=REASON_RE, max_length=128,
                      rule="must be one CamelCase word")
        validate.text("event.component", event["component"], example="smshare.kai.driver_upgrade", max_length=128)
        if not event["note"].strip():
            raise validate.BadInput("event.note", event["note"], "must say what happened", "cordoned for the upgrade")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            name=dict(type="str", required=True),
            labels=dict(type="dict", default={}),
            annotations=dict(type="dict", default={}),
            unschedulable=dict(type="bool"),
            event=dict(type="dict", options=dict(
                reason=dict(type="str", required=True),
                note=dict(type="str", required=True),
                type=dict(type="str", choices=["Normal", "Warning"], default="Normal"),
                component=dict(type="str", default="smshare.kai"),
            )),
        ),
        supports_check_mode=True,
    )
    params = module.params
    cluster_access.require_library(module)
    validate.refuse_bad_input(module, check_input)
    try:
        result = run(module, NodeCalls(cluster_access.api_client(params["kubeconfig"], params["context"])))
    except cluster_access.AccessError as exc:
        module.fail_json(msg=str(exc), failure="cluster")
    except ApiException as exc:
        module.fail_json(msg="the API server refused the change of Node %s: %s %s. Nothing of it was changed." % (
            params["name"], exc.status, exc.reason), failure="cluster")
    module.exit_json(**result)


if __name__ == "__main__":
    main()

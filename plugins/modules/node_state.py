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
  - "The Event's time is C(eventTime), in microseconds (with C(reportingComponent), C(reportingInstance) this
    controller's host name, and C(action) the reason), as C(events.k8s.io) writers set it: C(kubectl describe)
    then lists Events written within one second in the order they were written. Such an Event of a Node is
    kept in the C(kube-system) namespace (C(kubectl describe node) finds it there; C(kubectl get events -n
    kube-system) lists it)."
  - "One module run for what took a C(kubernetes.core.k8s) patch and a second one for the Event: the driver
    rollout enters about seven states per node."
  - "With O(steps), enters several states one after the other in the same run: one patch and one Event per step,
    in order, so a watcher of the Node sees each state as if each were a run of its own."
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
  steps:
    description:
      - States to enter one after the other, each with the keys of a single state (O(labels), O(annotations),
        O(unschedulable), O(event)); each is patched (where it differs from the step before) and its Event written
        before the next.
      - Instead of those keys at the top level, not with them. An empty list reads the Node and changes nothing.
      - A step the API server refuses (or does not answer) ends the run; the steps before it stand, and the message
        says how many (RV(entered)).
    type: list
    elements: dict
    suboptions:
      labels:
        description: As O(labels), for this step.
        type: dict
        default: {}
      annotations:
        description: As O(annotations), for this step.
        type: dict
        default: {}
      unschedulable:
        description: As O(unschedulable), for this step.
        type: bool
      event:
        description: As O(event), for this step.
        type: dict
        suboptions:
          reason:
            description: As O(event.reason).
            type: str
            required: true
          note:
            description: As O(event.note).
            type: str
            required: true
          type:
            description: As O(event.type).
            type: str
            choices: [Normal, Warning]
            default: Normal
          component:
            description: As O(event.component).
            type: str
            default: smshare.kai
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
        description: The Event's source component (also its C(reportingComponent)), a Kubernetes qualified name.
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

- name: Mark the node upgrade-required, then cordon it, in one run (an Event each)
  smshare.kai.node_state:
    name: gpu-node-1
    steps:
      - labels:
          smshare.kai/driver-upgrade-state: upgrade-required
        event:
          reason: DriverUpgrade
          note: "upgrade-required: moving to branch 615"
      - labels:
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
steps:
  description: With O(steps), each step's outcome in order.
  returned: when O(steps) is set
  type: list
  elements: dict
  contains:
    patched:
      description: Whether this step patched (in check mode, would patch) the Node.
      type: bool
    event:
      description: The name of the Event this step wrote; empty as for RV(event).
      type: str
    event_error:
      description: Why this step's Event could not be written.
      type: str
      returned: when its Event was not written
event:
  description:
    - The name of the Event written; empty when none was asked for, in check mode, or when it could not be written.
    - With O(steps), the last Event written (RV(steps) has each step's).
  returned: success
  type: str
event_error:
  description:
    - Why the Event asked for could not be written; the Node's change stands.
    - With O(steps), the last such reason (RV(steps) has each step's).
  returned: when the Event was not written
  type: str
failure:
  description: Why it failed - C(node_missing), C(cluster), C(bad_input), C(missing_library).
  returned: failure
  type: str
entered:
  description: With O(steps), how many steps stand (were made) when a later one was refused or got no answer.
  returned: when a step after the first of O(steps) was not made
  type: int
"""

import datetime
import re
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, validate
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException, kube_client as kclient


# A label value as the API validates it: empty, or at most 63 of these, alphanumeric at both ends.
LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
REASON_RE = r"[A-Z][A-Za-z0-9]*"
MESSAGE_LIMIT = 1000
# An Event with eventTime on a cluster-scoped object: kube-system is the namespace every API
# server accepts for it (1.20 refuses default; later ones take either).
EVENT_NAMESPACE = "kube-system"


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
        "metadata": {"generateName": node + ".", "namespace": EVENT_NAMESPACE},
        # kubectl describe node matches its events on the Node's name as uid (the kubelet's convention).
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": event["reason"], "message": message, "type": event["type"],
        "source": {"component": event["component"]},
        # As events.k8s.io's writers do (the action: the reason; the instance: this controller).
        "reportingComponent": event["component"], "reportingInstance": socket.gethostname()[:128],
        "action": event["reason"],
    }


def _stamp(body):
    # eventTime alone, in microseconds: kubectl describe sorts on lastTimestamp where one is set, whole
    # seconds, and the Events of one run's steps share their second.
    body["eventTime"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return body


class NodeCalls:
    """The module's three calls, with dicts: plain JSON where the client makes
    calls itself (no typed API to import), CoreV1Api with older libraries. A
    call without an answer raises cluster_access.Unanswered, one the server refused ApiException."""

    def __init__(self, client):
        self.client = client
        self.core = None if cluster_access.plain_calls(client) else kclient.CoreV1Api(client)

    def read(self, name):
        if self.core is None:
            found = cluster_access.answered(lambda: cluster_access.plain_json(self.client, "GET", "/api/v1/nodes/%s" % name))
            meta, spec = found.get("metadata") or {}, found.get("spec") or {}
            return {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
                    "unschedulable": bool(spec.get("unschedulable"))}
        found = cluster_access.answered(lambda: self.core.read_node(name, _request_timeout=cluster_access.REQUEST_TIMEOUT))
        return {"labels": found.metadata.labels or {}, "annotations": found.metadata.annotations or {},
                "unschedulable": bool(found.spec.unschedulable) if found.spec else False}

    def patch(self, name, body):
        if self.core is None:
            cluster_access.answered(lambda: cluster_access.plain_json(
                self.client, "PATCH", "/api/v1/nodes/%s" % name, body, content_type="application/merge-patch+json"))
        else:   # older libraries send a dict as a strategic merge patch: the same for labels, annotations and a bool
            cluster_access.answered(lambda: self.core.patch_node(name, body, _request_timeout=cluster_access.REQUEST_TIMEOUT))

    def create_event(self, body):
        if self.core is None:
            return cluster_access.answered(lambda: cluster_access.plain_json(
                self.client, "POST", "/api/v1/namespaces/%s/events" % EVENT_NAMESPACE, body))["metadata"]["name"]
        return cluster_access.answered(lambda: self.core.create_namespaced_event(
            EVENT_NAMESPACE, body, _request_timeout=cluster_access.REQUEST_TIMEOUT)).metadata.name


# The keys of one state: a step of `steps`, or the module's own top-level keys.
STATE_KEYS = ("labels", "annotations", "unschedulable", "event")


def state_options():
    """The argument spec of one state's keys (a fresh copy for each place it is used)."""
    return dict(
        labels=dict(type="dict", default={}),
        annotations=dict(type="dict", default={}),
        unschedulable=dict(type="bool"),
        event=dict(type="dict", options=dict(
            reason=dict(type="str", required=True),
            note=dict(type="str", required=True),
            type=dict(type="str", choices=["Normal", "Warning"], default="Normal"),
            component=dict(type="str", default="smshare.kai"),
        )),
    )


class StepRefused(Exception):
    """A step after the first was refused or got no answer: the ones before it stand."""

    def __init__(self, entered, step, exc):
        super(StepRefused, self).__init__(str(exc))
        self.entered, self.step = entered, step
        self.why = failure_text(exc)


def failure_text(exc):
    """What an API call's failure says: the status and reason the server gave, else the error."""
    return "%s %s" % (exc.status, exc.reason) if isinstance(exc, ApiException) else str(exc)


def describe_step(step):
    """A step as people name it: its labels and cordon."""
    said = ["%s=%s" % (key, value) for key, value in sorted(step["labels"].items())]
    if step["unschedulable"] is not None:
        said.append("cordoned" if step["unschedulable"] else "uncordoned")
    return ", ".join(said) or "annotations only"


def steps_of(params):
    """The states to enter, in order: `steps`, or the one the top-level keys describe."""
    if params["steps"] is not None:
        return params["steps"]
    return [{key: params[key] for key in STATE_KEYS}]


def write_event(module, calls, name, event, outcome):
    try:
        outcome["event"] = calls.create_event(_stamp(event_body(name, event)))
    except Exception as exc:  # pylint: disable=broad-except
        # A record for people: the Node's change stands whatever becomes of it.
        outcome["event_error"] = "the Event on Node %s could not be written: %s" % (name, failure_text(exc))
        module.warn(outcome["event_error"])


def run(module, calls):
    params = module.params
    name = params["name"]
    steps = steps_of(params)
    try:
        current = calls.read(name)
    except ApiException as exc:
        if exc.status == 404:
            module.fail_json(msg="Node %s is not in the cluster: nothing was changed. Check the node's name (kubectl get "
                             "nodes) against the inventory." % name, failure="node_missing")
        raise
    before, outcomes = current, []
    for index, step in enumerate(steps):
        patch, after = plan(current, step["labels"], step["annotations"], step["unschedulable"])
        outcome = {"patched": patch is not None, "event": ""}
        if not module.check_mode:
            try:
                if patch is not None:
                    calls.patch(name, patch)
            except (ApiException, cluster_access.Unanswered) as exc:
                if index == 0:
                    raise
                raise StepRefused(index, describe_step(step), exc)
            if step["event"]:
                write_event(module, calls, name, step["event"], outcome)
        outcomes.append(outcome)
        current = after
    patched = any(o["patched"] for o in outcomes)
    asked_events = any(step["event"] for step in steps)
    written = [o["event"] for o in outcomes if o["event"]]
    result = dict(changed=patched or (asked_events if module.check_mode else bool(written)), patched=patched,
                  event=written[-1] if written else "", **current)
    errors = [o["event_error"] for o in outcomes if "event_error" in o]
    if errors:
        result["event_error"] = errors[-1]
    if params["steps"] is not None:
        result["steps"] = outcomes
    if module._diff:
        cordons = [step["unschedulable"] for step in steps if step["unschedulable"] is not None]
        result["diff"] = diff(before, current, {k: None for step in steps for k in step["labels"]},
                              {k: None for step in steps for k in step["annotations"]}, cordons[-1] if cordons else None)
    return result


def check_state(prefix, state):
    """The rules of one state's keys (raises validate.BadInput); numbers become their text."""
    for field in ("labels", "annotations"):
        for key, value in state[field].items():
            validate.qualified_name("%s%s key" % (prefix, field), key, example="smshare.kai/driver-upgrade-state")
            if value is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = state[field][key] = str(value)     # a branch or a count templated as a number
            if not isinstance(value, str):
                raise validate.BadInput("%s%s[%s]" % (prefix, field, key), value, "must be a string or null (null removes it)",
                                        "'615'")
            if field == "labels" and (len(value) > 63 or not LABEL_VALUE_RE.fullmatch(value)):
                raise validate.BadInput("%slabels[%s]" % (prefix, key), value, "must be a label value: at most 63 letters, "
                                        "digits, '-', '_' or '.', starting and ending with a letter or digit", "upgrade-done")
    event = state["event"]
    if event:
        validate.text(prefix + "event.reason", event["reason"], example="DriverUpgrade", pattern=REASON_RE,
                      max_length=128, rule="must be one CamelCase word")
        validate.qualified_name(prefix + "event.component", event["component"], example="smshare.kai.driver_upgrade")
        if not event["note"].strip():
            raise validate.BadInput(prefix + "event.note", event["note"], "must say what happened", "cordoned for the upgrade")


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    validate.node_name("name", params["name"])
    if params["steps"] is None:
        check_state("", params)
        return
    top = [key for key in STATE_KEYS if params[key] not in (None, {})]
    if top:
        raise validate.BadInput(top[0], params[top[0]], "cannot be set beside steps: give each state's keys in its step",
                                "steps: [{labels: {...}, event: {...}}]")
    for index, step in enumerate(params["steps"]):
        check_state("steps[%d]." % index, step)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            name=dict(type="str", required=True),
            steps=dict(type="list", elements="dict", options=state_options()),
            **state_options()
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
    except StepRefused as refused:
        said = (refused.entered + 1, params["name"], refused.step, refused.why, refused.entered)
        module.fail_json(msg="step %d of Node %s's change (%s) was not made: %s. The %d step(s) before it stand; the "
                         "ones after it were not made." % said, failure="cluster", entered=refused.entered)
    except ApiException as exc:
        module.fail_json(msg="the API server refused the change of Node %s: %s %s. Nothing of it was changed." % (
            params["name"], exc.status, exc.reason), failure="cluster")
    except cluster_access.Unanswered as exc:
        module.fail_json(msg="the API server did not answer for Node %s: %s. Run it again once it answers: only what "
                         "differs is changed." % (params["name"], exc), failure="cluster")
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rollout_lock
short_description: Hold a cluster-wide lock (a coordination.k8s.io Lease) for the length of a rollout
version_added: 0.1.0
description:
  - "Takes, renews or gives back a Lease (C(coordination.k8s.io/v1)) so that one rollout at a time changes a
    fleet: a second one is refused with the holder named, when it took the lock and when it expires."
  - "A lock whose holder stopped renewing it (a killed run) expires after its O(ttl) seconds from its last
    renewal and is then taken over by the next rollout, which says whose it was. Every change is a write
    guarded by the Lease's C(resourceVersion): of two rollouts taking an expired lock at once, one wins and
    the other is refused."
  - "Giving the lock back deletes the Lease only while this O(holder) holds it."
  - "With O(holder_process) (the default), the Lease also records the Ansible run that holds it: the topmost
    C(ansible-playbook) (or C(ansible)) process above the module, with the machine's boot ID, in the annotation
    C(smshare.kai/holder-process). A lock whose recorded run was on the machine this module runs on and has
    ended (killed, Ctrl-C) is taken over at once, without waiting for O(ttl); a lock held from another machine
    still waits for it."
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.cluster_access
attributes:
  check_mode:
    support: full
    details: Writes nothing; says what it would do, and fails as a real run would when another rollout holds the lock.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: Giving the lock back is idempotent; taking it again renews it (a write of its renewal time, reported as a change).
options:
  name:
    description: The Lease's name.
    type: str
    default: smshare-driver-upgrade
  namespace:
    description: The Lease's namespace.
    type: str
    default: kube-system
  holder:
    description:
      - Who holds the lock (the Lease's C(holderIdentity)); the same value renews and gives back what it took.
      - Say who runs what, for the person another rollout is refused for, such as C(ops@bastion-1 driver_upgrade 2026-12-04T18:00:00).
    type: str
    required: true
  ttl:
    description: Seconds the lock stays taken after its last renewal (the Lease's C(leaseDurationSeconds)).
    type: int
    default: 3600
  holder_process:
    description:
      - Record the Ansible run that takes the lock, and take over a lock whose recorded run ended on this machine.
      - Set C(false) for a lock taken by hand that must outlive the command that took it.
    type: bool
    default: true
  state:
    description: C(present) takes the lock or renews it; C(absent) gives it back.
    type: str
    choices: [present, absent]
    default: present
requirements:
  - kubernetes (Python library)
"""

EXAMPLES = r"""
- name: Take the rollout lock
  smshare.kai.rollout_lock:
    holder: "{{ lookup('env', 'USER') }}@{{ lookup('pipe', 'hostname') }} driver_upgrade {{ now().isoformat() }}"
    ttl: 3600
  register: lock

- name: Give the lock back
  smshare.kai.rollout_lock:
    holder: "{{ lock.holder }}"
    state: absent
"""

RETURN = r"""
holder:
  description: The holder this run asked for.
  returned: always
  type: str
outcome:
  description: What was done (or, in check mode, would be) - C(created), C(renewed), C(taken_over), C(released), C(none).
  returned: success
  type: str
previous_holder:
  description: Whose expired lock was taken over (C(taken_over)), or who holds it when C(absent) left it alone.
  returned: when another holder had the lock
  type: str
reason:
  description: Why the lock was taken over - C(it had expired), C(its run (pid N on this machine) has ended), or C(it was given back).
  returned: when the lock was taken over
  type: str
expires:
  description: When the lock expires unless renewed (UTC, RFC 3339); empty when it was given back.
  returned: success
  type: str
failure:
  description: >-
    Why it failed - C(held) (another rollout holds the lock), C(conflict) (another rollout wrote it
    meanwhile), C(cluster), C(bad_input), C(missing_library).
  returned: failure
  type: str
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, run_process, validate
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException, kube_client as kclient


NAME_RE = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
PROCESS_ANNOTATION = "smshare.kai/holder-process"


def _time(value):
    """A Lease time (MicroTime: a datetime from the client, or its RFC 3339 text) as an aware datetime."""
    if value is None or isinstance(value, datetime.datetime):
        return value if value is None or value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    text = str(value).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)


def _rfc3339(when):
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if when else ""


def decide(spec, holder, now, holder_ended=None):
    """What to do with a Lease's spec (a dict: holderIdentity, renewTime, acquireTime, leaseDurationSeconds;
    None when there is no Lease) to take the lock for `holder` at `now`: (create, renew, take_over or refuse,
    why). holder_ended: the holder's recorded run ended on this machine (True), still runs (False), or
    cannot be told (None)."""
    if spec is None:
        return "create", ""
    if spec.get("holderIdentity") == holder:
        return "renew", ""
    if not spec.get("holderIdentity"):
        return "take_over", "it was given back"
    renewed = _time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds") or 0
    if renewed is None or renewed + datetime.timedelta(seconds=duration) <= now:
        return "take_over", "it had expired"
    if holder_ended:
        return "take_over", "its run (%s on this machine) has ended" % run_process.describe(spec.get("process"))
    return "refuse", ""


def _spec_dict(lease):
    spec = lease.spec
    return {"holderIdentity": spec.holder_identity, "renewTime": spec.renew_time, "acquireTime": spec.acquire_time,
            "leaseDurationSeconds": spec.lease_duration_seconds,
            "process": (lease.metadata.annotations or {}).get(PROCESS_ANNOTATION, "")}


def _held_message(name, namespace, spec):
    renewed = _time(spec.get("renewTime") or spec.get("acquireTime"))
    expires = renewed + datetime.timedelta(seconds=spec.get("leaseDurationSeconds") or 0)
    return ("another rollout holds the lock (Lease %s/%s): %s, taken %s, renewed %s, expires %s unless renewed. "
            "Nothing was changed. Wait for it to finish; if it is gone (killed on another machine), the lock is "
            "free once it expires, or delete it now: kubectl -n %s delete lease %s" % (
                namespace, name, spec.get("holderIdentity"), _rfc3339(_time(spec.get("acquireTime"))),
                _rfc3339(renewed), _rfc3339(expires), namespace, name))


def run(module, api):
    params = module.params
    name, namespace, holder, ttl = params["name"], params["namespace"], params["holder"], params["ttl"]
    now = datetime.datetime.now(datetime.timezone.utc)
    expires = _rfc3339(now + datetime.timedelta(seconds=ttl))
    try:
        lease = api.read_namespaced_lease(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        lease = None
    spec = _spec_dict(lease) if lease is not None else None

    if params["state"] == "absent":
        if spec is None:
            return dict(changed=False, outcome="none", holder=holder, expires="")
        if spec["holderIdentity"] != holder:
            return dict(changed=False, outcome="none", holder=holder, previous_holder=spec["holderIdentity"] or "",
                        expires=_rfc3339(_time(spec["renewTime"] or spec["acquireTime"])))
        if not module.check_mode:
            api.delete_namespaced_lease(name, namespace, body=kclient.V1DeleteOptions(
                preconditions=kclient.V1Preconditions(resource_version=lease.metadata.resource_version)))
        return dict(changed=True, outcome="released", holder=holder, expires="")

    ended = run_process.ended(spec.get("process")) if spec and params["holder_process"] else None
    action, why = decide(spec, holder, now, ended)
    if action == "refuse":
        module.fail_json(msg=_held_message(name, namespace, spec), failure="held", holder=holder,
                         previous_holder=spec["holderIdentity"])
    result = dict(changed=True, outcome={"create": "created", "renew": "renewed", "take_over": "taken_over"}[action],
                  holder=holder, expires=expires)
    if action == "take_over":
        result.update(previous_holder=spec["holderIdentity"] or "", reason=why)
    if module.check_mode:
        return result
    record = run_process.current() if params["holder_process"] else None
    body = kclient.V1Lease(
        metadata=kclient.V1ObjectMeta(name=name, namespace=namespace, labels={"app.kubernetes.io/managed-by": "smshare.kai"},
                                      annotations={PROCESS_ANNOTATION: record} if record else None),
        spec=kclient.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=ttl, renew_time=now,
                                 acquire_time=spec["acquireTime"] if action == "renew" else now))
    if action == "create":
        api.create_namespaced_lease(namespace, body)
    else:   # guarded by the version read: a rollout that wrote it meanwhile wins
        body.metadata.resource_version = lease.metadata.resource_version
        api.replace_namespaced_lease(name, namespace, body)
    return result


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    validate.text("name", params["name"], example="smshare-driver-upgrade", pattern=NAME_RE, max_length=253,
                  rule="must be a Kubernetes object name (lower case letters, digits, - and .)")
    validate.namespace("namespace", params["namespace"], example="kube-system")
    validate.text("holder", params["holder"].strip() and params["holder"], max_length=253,
                  example="ops@bastion-1 driver_upgrade to 615 2026-12-04T18:00:00Z")
    validate.integer("ttl", params["ttl"], example="3600 (longer than a batch of the rollout takes)", minimum=1)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            name=dict(type="str", default="smshare-driver-upgrade"),
            namespace=dict(type="str", default="kube-system"),
            holder=dict(type="str", required=True),
            ttl=dict(type="int", default=3600),
            holder_process=dict(type="bool", default=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    cluster_access.require_library(module)
    validate.refuse_bad_input(module, check_input)
    try:
        api = kclient.CoordinationV1Api(cluster_access.api_client(params["kubeconfig"], params["context"]))
        result = run(module, api)
    except cluster_access.AccessError as exc:
        module.fail_json(msg=str(exc), failure="cluster", holder=params["holder"])
    except ApiException as exc:
        if exc.status == 409:
            module.fail_json(msg="another rollout wrote the lock (Lease %s/%s) while this one took it: it holds it "
                             "now. Nothing was changed; run again once it is done." % (
                                 params["namespace"], params["name"]), failure="conflict", holder=params["holder"])
        module.fail_json(msg="the API server refused the lock (Lease %s/%s): %s %s" % (
            params["namespace"], params["name"], exc.status, exc.reason), failure="cluster", holder=params["holder"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fraction_smoke_test
short_description: Prove that GPU fractions are enforced, not only requested (the guide's two-pod smoke test)
version_added: 0.1.0
description:
  - "Runs the guide's step 5 and its SM-share measurement as one task: creates the two half-GPU pods
    C(fraction-smoke-a) and C(fraction-smoke-b) (C(gpu-fraction), the C(sm-sharing) compute mode for container
    C(main), C(schedulerName: kai-scheduler), C(runtimeClassName: nvidia), uid 1000, every capability dropped)
    and the C(fraction-devicequery) pod, waits for them, runs the four checks and the measurement, and deletes
    its pods."
  - "The pass conditions are the published guide's check table."
  - "Check C(binder): both pods show a non-empty C(gpu-compute.portion) and C(gpu-memory.request) and a real
    C(gpus.devices) GPU UUID in their C(nvidia.com/container.main.*) annotations, on one node; an empty UUID
    means a mismatched fork pair. The scheduler bin-packs, so both should be on one GPU: different UUIDs are a
    warning naming both."
  - "Check C(injection): C(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) is the fraction x 100 and
    C(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) is C(0=<N>M) with N = (the node's C(nvidia.com/gpu.memory) MiB -
    O(reserved_gpu_memory_mib)) x fraction; C(NVIDIA_GPU_MEMORY_REQUEST/LIMIT) (or the plural spelling of
    earlier fork commits: the one found is reported), C(CUDA_MPS_PIPE_DIRECTORY) and C(NVIDIA_VISIBLE_DEVICES)
    consistent with check 1. No C(CUDA_MPS_*) at all is named as fractiond not registered with NRI,
    C(NVIDIA_VISIBLE_DEVICES=void) as a mismatched fork pair."
  - "Check C(mps): C(nvidia-cuda-mps-control -p 3 namespace list --server=shared) run in the mpsd pod on the
    pods' node lists each pod's C(kai_*) namespace, named from its container's ID as the fork's mpsd names it,
    at the fraction's percentage (C(50.00)), and C(default) at O(mps_default_percentage) (C(10.00));
    C(kai_*) namespaces of other containers (deleted pods linger about a minute) are a warning."
  - "Check C(memory): C(nvidia-smi --query-gpu=memory.total) in each pod, with a hostile
    C(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100), shows the pod's memory cap."
  - "Check C(sm_share): deviceQuery in a half-GPU pod that asks for 100 % of the SMs sees the GPU's SM count
    times the fraction, rounded down (54 of 108 on an A100)."
  - "Check C(greedy), with O(greedy_neighbour) (opt-in, last): the platform notes' greedy neighbour. Two pods of
    the fraction on one GPU again, in O(greedy_image): C(fraction-greedy) runs a small CUDA probe (Python, the
    driver API through ctypes: no CUDA toolkit in the image) that sets its own
    C(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100), removes its own C(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), allocates 4/5
    of its memory cap, tries its cap plus an eighth and holds what it got; beside it the same probe in
    C(fraction-neighbour), which keeps to its share, allocates 4/5 of its own cap. It passes when the greedy pod
    sees only its SM share (as deviceQuery measures it), gets the 4/5 and is refused the rest with
    C(CUDA_ERROR_OUT_OF_MEMORY), and the neighbour sees its share and gets its 4/5; a failure names the
    enforcement that is missing (the MPS server not capping SMs, nothing below the pod enforcing memory) and what
    to do."
  - "When the pods stay Pending it says why (RV(pending)): no C(schedulerName: kai-scheduler), a missing or
    wrong C(kai.scheduler/queue) label, an unknown or non-leaf queue, no allocatable C(nvidia.com/gpu), a
    failing GPU reservation pod (no C(nvidia) RuntimeClass, NVML cannot load), reservation pods re-created in a
    loop with C(UnexpectedAdmissionError), a node without the C(nvidia.com/gpu.memory) label (the binder's
    C(BindingError)), the container toolkit's memory-limit hook refused (C(Insufficient Permissions)), an MPS
    namespace fractiond could not provision (it fails closed), or the scheduler's own message."
  - "Its pods are always deleted: on success, on failure and on interruption (SIGINT, SIGTERM, SIGHUP); a run
    first deletes what an earlier, killed run left (pods with its labels for the same node)."
author:
  - smshare.kai maintainers (@smshare)
options:
  namespace:
    description: Namespace of the test pods (the guide's is C(default)).
    type: str
    default: default
  queue:
    description: The pods' C(kai.scheduler/queue) label (a leaf queue). Empty leaves the label off.
    type: str
    default: default-queue
  fraction:
    description: The C(gpu-fraction) of every test pod, greater than 0 and at most 0.5 (two pods share one GPU).
    type: float
    default: 0.5
  node:
    description: Run on this Kubernetes node (a C(kubernetes.io/hostname) node selector). Unset, the scheduler picks.
    type: str
  tolerate_unschedulable:
    description:
      - Give the pods a toleration of C(node.kubernetes.io/unschedulable), so they run on O(node) while it is
        cordoned (a rolling driver upgrade validates a node before it takes work again). Needs O(node).
    type: bool
    default: false
  name_suffix:
    description:
      - Appended to the guide's pod names (C(fraction-smoke-a-<suffix>)), so runs on several nodes share a
        namespace. Default with O(node) the node's name, else none (the guide's names).
    type: str
  image:
    description: Image of the two smoke pods; it must have C(env), C(sleep) and C(nvidia-smi).
    type: str
    default: nvidia/cuda:13.3.1-base-ubuntu24.04
  devicequery_image:
    description: Image of the deviceQuery pod (its entrypoint runs deviceQuery).
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:devicequery
  image_pull_secrets:
    description: Names of image pull secrets in O(namespace) for the test pods.
    type: list
    elements: str
    default: []
  image_pull_policy:
    description: The containers' imagePullPolicy (unset, Kubernetes' default).
    type: str
    choices: [Always, IfNotPresent, Never]
  runtime_class:
    description: The pods' runtimeClassName (the guide's C(nvidia)); empty leaves it off.
    type: str
    default: nvidia
  scheduler_name:
    description: The pods' schedulerName. Anything but C(kai-scheduler) is only useful to see the diagnosis.
    type: str
    default: kai-scheduler
  measure_sm_share:
    description: Also run the deviceQuery pod (check C(sm_share)).
    type: bool
    default: true
  greedy_neighbour:
    description:
      - Also run the greedy-neighbour check (check C(greedy)), after the others. It holds a GPU of the node for
        its pods' start and a few seconds more.
    type: bool
    default: false
  greedy_image:
    description:
      - "Image of the greedy-neighbour pods. It needs C(python3) with C(ctypes) and nothing else (C(sleep) for the
        neighbour): the probe calls C(libcuda.so.1), which the NVIDIA runtime mounts (the pods set
        C(NVIDIA_DRIVER_CAPABILITIES=compute,utility)). The guide's nvidia/cuda base image has no python3."
    type: str
    default: python:3.12-slim
  gpu_sm_count:
    description:
      - SMs of one GPU, for the C(sm_share) check. Unset, taken from the GPU's product name (deviceQuery's
        device name, else the node's C(nvidia.com/gpu.product) label) in a table of NVIDIA's figures
        (A100 108, H100 SXM 132, H100 PCIe 114, ...).
    type: int
  mpsd_namespace:
    description: Namespace of the gpu-fractioning release (its mpsd DaemonSet's pods).
    type: str
    default: gpu-fractioning
  mpsd_selector:
    description: Label selector of the mpsd pods.
    type: str
    default: app.kubernetes.io/component=mpsd
  mps_server:
    description: The MPS server whose namespaces are listed.
    type: str
    default: shared
  reservation_namespace:
    description: Namespace of KAI's GPU reservation pods (for the diagnosis).
    type: str
    default: kai-resource-reservation
  reserved_gpu_memory_mib:
    description:
      - The KAI binder's C(reservedGpuMemory) in MiB (its default C(1Gi), the MPS server's own context), for
        check C(injection)'s formula. Change it only where the binder's argument was changed.
    type: int
    default: 1024
  mps_default_percentage:
    description: The active thread percentage mpsd caps the server's C(default) namespace at (check C(mps)).
    type: int
    default: 10
  timeout:
    description: Longest wait, in seconds, for the pods to be Ready (and deviceQuery to finish).
    type: int
    default: 180
  settle:
    description:
      - Seconds after which a pod that is still unscheduled for a reason that waiting cannot fix (scheduler
        name, queue label, unknown or non-leaf queue, no GPU node) ends the wait early.
    type: int
    default: 15
  report_markdown:
    description: Write a Markdown report to this file (on the host running the module).
    type: path
  report_junit:
    description: Write a JUnit XML file (one test case per check) to this file.
    type: path
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.cluster_access
attributes:
  check_mode:
    support: full
    details: Creates and deletes nothing; returns the pods it would create (RV(would_create)) and the leftover
      pods it would delete first (RV(would_delete)).
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The cluster is left as it was found; C(changed) is true only when leftovers of an interrupted run
      were deleted.
notes:
  - The role P(smshare.kai.smoke_test#role) runs it on every GPU node in parallel.
  - Uses the C(kubernetes) Python library (the one kubernetes.core needs) for the API, C(exec) and logs.
  - "A pod's MPS namespace is C(kai_) + its container ID mapped into C([a-z0-9_]) and cut to 16 characters +
    C(_) + the first 20 hex digits of the ID's SHA-256, as the fork's mpsd names it
    (kai-scheduler/gpu-fractioning C(mpsns/name.go))."
requirements:
  - kubernetes (Python library)
"""

EXAMPLES = r"""
- name: Prove the fractions on one GPU node
  smshare.kai.fraction_smoke_test:
    kubeconfig: /etc/kubernetes/admin.conf
    node: gpu-node-07
    report_markdown: /var/tmp/smshare/smoke-gpu-node-07.md
    report_junit: /var/tmp/smshare/smoke-gpu-node-07.xml
  register: smoke

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ smoke.table }}"
"""

RETURN = r"""
passed:
  description: Every check passed.
  returned: success and failure after the pods ran
  type: bool
checks:
  description: One entry per check (C(binder), C(injection), C(mps), C(memory), C(sm_share), and C(greedy) with
    O(greedy_neighbour)).
  returned: success and failure after the pods ran
  type: list
  elements: dict
  contains:
    check:
      description: The check's name.
      type: str
      sample: mps
    title:
      description: What it proves.
      type: str
    node:
      description: The node the pods ran on.
      type: str
    gpu:
      description: The GPU UUID the binder chose (null when the pods disagree).
      type: str
    passed:
      description: Whether it held.
      type: bool
    message:
      description: What was seen, or what is wrong.
      type: str
    evidence:
      description: The values read (annotations, variables, MPS rows, outputs).
      type: dict
    warnings:
      description: What does not fail the check but is worth a look (pods on different GPUs, lingering MPS
        namespaces, no C(nvidia.com/gpu.memory) label to check the formula with); also issued as warnings.
      type: list
      elements: str
rows:
  description: The per-node/GPU table as data (node, gpu, pod, portion, memory cap, injected and MPS percentage,
    memory and SMs seen).
  returned: success and failure after the pods ran
  type: list
  elements: dict
table:
  description: RV(rows) as text lines, then one line per check.
  returned: success and failure after the pods ran
  type: list
  elements: str
pending:
  description: For each pod that did not become Ready, the causes found (C(cause), C(message)).
  returned: failure (failure=pending)
  type: list
  elements: dict
would_create:
  description: The pods a run would create (check mode).
  returned: check mode
  type: list
  elements: dict
would_delete:
  description: Leftover pods a run would delete first (check mode).
  returned: check mode
  type: list
  elements: str
deleted:
  description: The pods deleted (leftovers and this run's).
  returned: always
  type: list
  elements: str
node:
  description: The node the pods ran on.
  returned: success and failure after the pods were bound
  type: str
reports:
  description: Report files written.
  returned: always
  type: list
  elements: str
failure:
  description: >-
    Why the module failed: V(checks_failed) (a check did not hold; the message names node, GPU and check),
    V(pending) (pods not Ready in time; see RV(pending)), V(interrupted) (a signal; the pods were deleted),
    V(bad_input), V(missing_library), V(cluster) (the API server refused or could not be reached),
    V(unparsable) (an answer in an unknown format), V(pods_deleted) (a test pod was deleted by something else
    while the module waited).
  returned: failure
  type: str
"""

import os
import re
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks as st
from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, registry, validate
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import ApiException, kube_client as kclient

NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
NODE_RE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
SELECTOR_RE = re.compile(r"[A-Za-z0-9._/=,!-]+")
# causes waiting cannot fix (a missing queue label is not one: KAI's podgrouper may
# put the pod in default-queue, so it is only named when the pod is still Pending)
DEFINITIVE = ("scheduler_name", "queue_unknown", "queue_not_leaf", "no_gpu_nodes", "node_cordoned",
              "reservation_pod_loop", "reservation_pod_failed", "container_waiting", "container_terminated",
              "image_pull", "gpu_memory_label_missing", "memory_limit_hook_unsupported", "mps_namespace_refused")
POLL = 1.0
NO_ANSWER = object()   # Cluster._call: a 404 is a failure like any other


class Interrupted(Exception):
    pass


def check_input(params):
    """Every parameter rule, before anything is created (raises validate.BadInput)."""
    validate.text("namespace", params["namespace"], example="default", pattern=NAME_RE,
                  rule="must be a namespace name", max_length=63)
    if params["queue"]:
        validate.text("queue", params["queue"], example="default-queue", pattern=NODE_RE,
                      rule="must be a queue name", max_length=63)
    if not 0 < params["fraction"] <= 0.5:
        raise validate.BadInput("fraction", params["fraction"], "must be greater than 0 and at most 0.5 (two pods "
                                "share one GPU)", "0.5")
    if params["node"] is not None:
        validate.text("node", params["node"], example="gpu-node-07", pattern=NODE_RE, rule="must be a node name",
                      max_length=253)
    if params["tolerate_unschedulable"] and params["node"] is None:
        raise validate.BadInput("tolerate_unschedulable", True, "needs node: without it the pods could land on any "
                                "cordoned node", "node: gpu-node-07 with tolerate_unschedulable: true")
    if params["name_suffix"]:
        validate.text("name_suffix", params["name_suffix"], example="gpu-node-07", pattern=NAME_RE,
                      rule="must be lower-case letters, digits and '-'", max_length=40)
    for key in ("image", "devicequery_image", "greedy_image"):
        registry.check_image(key, params[key], st.DEFAULT_IMAGE,
                             "give the pods an image pull secret (image_pull_secrets)")
    for index, name in enumerate(params["image_pull_secrets"]):
        validate.text("image_pull_secrets[%d]" % index, name, example="registry-login", pattern=NAME_RE,
                      rule="must be a Secret name")
    if params["runtime_class"]:
        validate.text("runtime_class", params["runtime_class"], example="nvidia", pattern=NODE_RE,
                      rule="must be a RuntimeClass name")
    validate.text("scheduler_name", params["scheduler_name"], example="kai-scheduler", pattern=NODE_RE,
                  rule="must be a scheduler name")
    for key in ("mpsd_namespace", "reservation_namespace"):
        validate.text(key, params[key], example="gpu-fractioning", pattern=NAME_RE, rule="must be a namespace name")
    validate.text("mpsd_selector", params["mpsd_selector"], example="app.kubernetes.io/component=mpsd",
                  pattern=SELECTOR_RE, rule="must be a label selector")
    validate.text("mps_server", params["mps_server"], example="shared", pattern=re.compile(r"[A-Za-z0-9_.-]+"),
                  rule="must be an MPS server name")
    for key, low, high in (("timeout", 10, 3600), ("settle", 1, 3600)):
        if not low <= params[key] <= high:
            raise validate.BadInput(key, params[key], "must be between %d and %d seconds" % (low, high), str(low * 3))
    if params["gpu_sm_count"] is not None and not 1 <= params["gpu_sm_count"] <= 1024:
        raise validate.BadInput("gpu_sm_count", params["gpu_sm_count"], "must be between 1 and 1024", "108")
    if not 0 <= params["reserved_gpu_memory_mib"] <= 65536:
        raise validate.BadInput("reserved_gpu_memory_mib", params["reserved_gpu_memory_mib"],
                                "must be between 0 and 65536 MiB", "1024")
    if not 1 <= params["mps_default_percentage"] <= 100:
        raise validate.BadInput("mps_default_percentage", params["mps_default_percentage"],
                                "must be between 1 and 100", "10")
    # Checked before the cluster is read: a report that cannot be written is found now, not after the pods ran.
    for key in ("report_markdown", "report_junit"):
        if params[key]:
            validate.writable_file(key, params[key], example="/var/tmp/smshare/smoke.md")


class Cluster(object):
    """The few API calls the smoke test makes."""

    def __init__(self, kubeconfig, context):
        try:
            api = cluster_access.api_client(kubeconfig, context)
        except cluster_access.AccessError as exc:
            raise st.SmokeError(str(exc), "cluster")
        self.api = api
        self.core = kclient.CoreV1Api(api)
        self.custom = kclient.CustomObjectsApi(api)
        self.node_api = kclient.NodeV1Api(api)

    def _call(self, what, func, *args, if_missing=NO_ANSWER, **kwargs):
        """func's answer; any failure a SmokeError (cluster) naming `what`,
        but a 404 answers `if_missing` where that is given."""
        try:
            return func(*args, **kwargs)
        except Exception as exc:  # pylint: disable=broad-except
            if isinstance(exc, ApiException):
                if exc.status == 404 and if_missing is not NO_ANSWER:
                    return if_missing
                raise st.SmokeError("%s: %s %s" % (what, exc.status, exc.reason), "cluster")
            raise st.SmokeError("%s: %s" % (what, exc), "cluster")

    def _dict(self, obj):
        return self.api.sanitize_for_serialization(obj)

    def pods(self, namespace, selector=None, field=None):
        kwargs = {}
        if selector:
            kwargs["label_selector"] = selector
        if field:
            kwargs["field_selector"] = field
        found = self._call("listing pods in %s" % namespace, self.core.list_namespaced_pod, namespace, **kwargs)
        return self._dict(found).get("items") or []

    def pod(self, namespace, name):
        """The pod as a dict; None when there is none."""
        found = self._call("reading pod %s/%s" % (namespace, name), self.core.read_namespaced_pod, name, namespace,
                           if_missing=None)
        return None if found is None else self._dict(found)

    def create(self, manifest):
        meta = manifest["metadata"]
        self._call("creating pod %s/%s" % (meta["namespace"], meta["name"]), self.core.create_namespaced_pod,
                   meta["namespace"], manifest)

    def delete(self, namespace, name):
        """True when this call deleted the pod, False when it was gone already."""
        return self._call("deleting pod %s/%s" % (namespace, name), self.core.delete_namespaced_pod, name, namespace,
                          grace_period_seconds=0, if_missing=False) is not False

    def events(self, namespace, name=None):
        kwargs = {"field_selector": "involvedObject.name=%s" % name} if name else {}
        found = self._call("listing events in %s" % namespace, self.core.list_namespaced_event, namespace, **kwargs)
        return self._dict(found).get("items") or []

    def nodes(self):
        return self._dict(self._call("listing nodes", self.core.list_node)).get("items") or []

    def node(self, name):
        try:
            return self._dict(self.core.read_node(name))
        except ApiException:
            return None

    def custom_list(self, group, version, plural, namespace=None):
        """Items, or None when the API does not serve the resource."""
        try:
            if namespace:
                found = self.custom.list_namespaced_custom_object(group, version, namespace, plural)
            else:
                found = self.custom.list_cluster_custom_object(group, version, plural)
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise st.SmokeError("listing %s: %s %s" % (plural, exc.status, exc.reason), "cluster")
        return found.get("items") or []

    def runtime_classes(self):
        try:
            return [r.metadata.name for r in self.node_api.list_runtime_class().items]
        except Exception:  # pylint: disable=broad-except
            return None

    def exec_(self, namespace, name, command, container=None, timeout=60):
        """(stdout, stderr, rc) of a command in a container, within `timeout` seconds."""
        try:
            return cluster_access.exec_in_pod(self.core, namespace, name, command, container, timeout)
        except cluster_access.ExecTimeout as exc:
            if not exc.started:
                raise self._exec_error(command, namespace, name, exc)
            # A command that does not end is a result for its check (rc None), not a lost cluster.
            return exc.stdout, (exc.stderr + "\n" if exc.stderr else "") + str(exc), None
        except Exception as exc:  # pylint: disable=broad-except
            raise self._exec_error(command, namespace, name, exc)

    @staticmethod
    def _exec_error(command, namespace, name, exc):
        shown = " ".join(command)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        return st.SmokeError("exec %s in %s/%s: %s" % (shown, namespace, name, exc), "cluster")

    def logs(self, namespace, name, container=None):
        kwargs = {"container": container} if container else {}
        return self._call("logs of %s/%s" % (namespace, name), self.core.read_namespaced_pod_log, name, namespace,
                          **kwargs)


def is_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def is_done(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def has_started(pod):
    """Its container runs or ran (its log can be read)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if status.get("name") == st.CONTAINER and (state.get("running") is not None
                                                   or state.get("terminated") is not None):
            return True
    return False


class Smoke(object):
    def __init__(self, module, cluster):
        self.module = module
        self.p = module.params
        self.cluster = cluster
        self.run = st.run_key(self.p["node"])
        self.selector = "%s=%s,%s=%s" % (st.MANAGED_BY[0], st.MANAGED_BY[1], st.RUN_LABEL, self.run)
        self.deleted = []
        self.created = []

    def leftovers(self):
        return [p["metadata"]["name"] for p in self.cluster.pods(self.p["namespace"], self.selector)]

    def delete_all(self, names, wait=60):
        ns = self.p["namespace"]
        errors = []
        for name in names:   # one refused delete must not leave the others behind
            try:
                if self.cluster.delete(ns, name):
                    self.deleted.append(name)
            except st.SmokeError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        deadline = time.time() + wait
        while time.time() < deadline:
            remaining = [n for n in names if self.cluster.pod(ns, n) is not None]
            if not remaining:
                return []
            time.sleep(POLL)
        return remaining

    def wait(self, pods, dq):
        """Read the pods until all are Ready (deviceQuery: finished); returns (objects, dq object, pending)."""
        ns = self.p["namespace"]
        start = time.time()
        deadline = start + self.p["timeout"]
        while True:
            current = [self.cluster.pod(ns, m["metadata"]["name"]) for m in pods]
            dq_now = self.cluster.pod(ns, dq["metadata"]["name"]) if dq else None
            gone = [m["metadata"]["name"] for m, c in zip(pods + ([dq] if dq else []), current + [dq_now])
                    if c is None]
            if gone:
                raise st.SmokeError("%s deleted while the smoke test waited for %s (by another user, controller or "
                                    "an earlier run's cleanup): run it again" % (
                                        ", ".join(gone), "it" if len(gone) == 1 else "them"), "pods_deleted")
            waiting = [c for c in current if c is None or not is_ready(c)]
            if dq is not None and (dq_now is None or not is_done(dq_now)):
                waiting.append(dq_now)
            if not waiting:
                return current, dq_now, []
            now = time.time()
            if now >= deadline or now - start >= self.p["settle"]:
                pending = self.diagnose([w for w in waiting if w is not None])
                definitive = all(any(c["cause"] in DEFINITIVE for c in p["causes"]) for p in pending)
                if now >= deadline or (pending and definitive):
                    return current, dq_now, pending
            time.sleep(POLL)

    def diagnose(self, pods):
        ns = self.p["namespace"]
        nodes = self.cluster.nodes()
        queues = self.cluster.custom_list("scheduling.run.ai", "v2", "queues")
        groups = self.cluster.custom_list("scheduling.run.ai", "v2alpha2", "podgroups", ns) or []
        reservation = self.cluster.pods(self.p["reservation_namespace"])
        reservation_events = self.cluster.events(self.p["reservation_namespace"])
        runtime_classes = self.cluster.runtime_classes()
        pending = []
        for pod in pods:
            name = pod["metadata"]["name"]
            group_name = (pod["metadata"].get("annotations") or {}).get("pod-group-name")
            mine = [g for g in groups if g["metadata"]["name"] == group_name or name in g["metadata"]["name"]]
            gpu_group = (pod["metadata"].get("labels") or {}).get(st.GPU_GROUP_LABEL)
            related = [r for r in reservation if not gpu_group
                       or (r["metadata"].get("labels") or {}).get(st.GPU_GROUP_LABEL) == gpu_group]
            if self.p["node"]:
                related = [r for r in related if (r.get("spec") or {}).get("nodeName") in (None, self.p["node"])]
            events = st.events_of(pod, self.cluster.events(ns, name))
            causes = st.diagnose(pod, events, nodes, queues, mine, related, reservation_events, runtime_classes)
            pending.append({"pod": name, "phase": (pod.get("status") or {}).get("phase"), "causes": causes})
        return pending

    def mps_namespaces(self, node):
        mpsd = self.cluster.pods(self.p["mpsd_namespace"], self.p["mpsd_selector"], "spec.nodeName=%s" % node)
        command = ["nvidia-cuda-mps-control", "-p", "3", "namespace", "list", "--server=%s" % self.p["mps_server"]]
        if not mpsd:
            where = (self.p["mpsd_selector"], node, self.p["mpsd_namespace"])
            raise st.SmokeError("no mpsd pod (%s) on node %s in %s" % where, "failed")
        pod = mpsd[0]
        out, err, rc = self.cluster.exec_(self.p["mpsd_namespace"], pod["metadata"]["name"], command)
        shown = "kubectl -n %s exec %s -- %s" % (self.p["mpsd_namespace"], pod["metadata"]["name"], " ".join(command))
        if rc != 0:
            why = "did not end" if rc is None else "failed (rc %s)" % rc
            raise st.SmokeError("%s %s: %s" % (shown, why, (err or out).strip()), "failed",
                                cmd=shown, rc=rc, stdout=out, stderr=err)
        try:
            return st.parse_namespace_list(out), shown
        except ValueError as exc:
            raise st.SmokeError("%s: unexpected output (%s): %r" % (shown, exc, out[:500]), "unparsable",
                                cmd=shown, stdout=out)

    def checks(self, pods):
        """The four checks on the two Ready smoke pods: (node, results, rows)."""
        ns = self.p["namespace"]
        node = pods[0]["spec"].get("nodeName")
        decisions = [st.binder_decision(p) for p in pods]
        results = [st.check_binder(node, decisions, self.p["fraction"])]
        envs, views = {}, {}
        for pod in pods:
            name = pod["metadata"]["name"]
            out, _err, _rc = self.cluster.exec_(ns, name, ["env"], st.CONTAINER)
            envs[name] = st.parse_env(out)
            out, err, rc = self.cluster.exec_(ns, name, ["env", "%s=%s" % (st.ENV_PERCENTAGE, st.HOSTILE_PERCENTAGE),
                                                         "nvidia-smi", "--query-gpu=memory.total",
                                                         "--format=csv,noheader"], st.CONTAINER)
            try:
                views[name] = st.parse_smi_memory(out) if rc == 0 else None
            except ValueError:
                views[name] = None
            if views[name] is None:
                self.module.warn("nvidia-smi in %s: rc %s %s" % (name, rc, (err or out).strip()[:300]))
        gpu_memory = st.node_gpu_memory_mib(self.cluster.node(node)) if node else None
        results.append(st.check_injection(node, decisions, envs, self.p["fraction"], gpu_memory,
                                          self.p["reserved_gpu_memory_mib"]))
        rows_ns = {}
        try:
            namespaces, command = self.mps_namespaces(node)
            results.append(st.check_mps(node, decisions, pods, namespaces, command, self.p["mps_default_percentage"]))
            for pod in pods:
                row = st.namespace_of(pod, namespaces)
                if row:
                    rows_ns[pod["metadata"]["name"]] = row
        except st.SmokeError as exc:
            results.append(st.result("mps", node, False, exc.msg, exc.details))
        results.append(st.check_memory(node, decisions, views))
        return node, results, st.summary_rows(node, decisions, envs, rows_ns, views, None)

    def sm_share(self, dq):
        """The SM-share measurement on the finished deviceQuery pod: (result, table row)."""
        ns = self.p["namespace"]
        node = dq["spec"].get("nodeName")
        decision = st.binder_decision(dq)
        parsed = None
        try:
            parsed = st.parse_device_query(self.cluster.logs(ns, dq["metadata"]["name"], st.CONTAINER))
        except (ValueError, st.SmokeError) as exc:
            self.module.warn("deviceQuery output not readable: %s" % exc)
        product = (parsed or {}).get("device") or (((self.cluster.node(node) or {}).get("metadata") or {})
                                                   .get("labels") or {}).get("nvidia.com/gpu.product")
        sm_count = st.sm_count_for(product, self.p["gpu_sm_count"])
        check = st.check_sm_share(node, self.p["fraction"], parsed, sm_count, decision)
        row = {"pod": dq["metadata"]["name"], "gpu": ",".join(decision["devices"]) or None,
               "portion": decision["portion"], "memory_cap_mib": decision["memory_limit_mib"], "parsed": parsed}
        return check, st.summary_rows(node, [], {}, {}, {}, row)

    def wait_greedy(self, manifests):
        """Read the greedy pod and its neighbour until the neighbour is Ready and the greedy
        pod's probe printed its result (or ended); returns (greedy, neighbour, its log, pending)."""
        ns = self.p["namespace"]
        names = [m["metadata"]["name"] for m in manifests]
        start = time.time()
        deadline = start + self.p["timeout"]
        while True:
            greedy, neighbour = [self.cluster.pod(ns, name) for name in names]
            gone = [name for name, obj in zip(names, (greedy, neighbour)) if obj is None]
            if gone:
                raise st.SmokeError("%s deleted while the smoke test waited for %s (by another user, controller or "
                                    "an earlier run's cleanup): run it again" % (
                                        ", ".join(gone), "it" if len(gone) == 1 else "them"), "pods_deleted")
            log = self.cluster.logs(ns, names[0], st.CONTAINER) if has_started(greedy) else ""
            printed = st.parse_probe(log) is not None or is_done(greedy)
            if printed and is_ready(neighbour):
                return greedy, neighbour, log, []
            now = time.time()
            if now >= deadline or now - start >= self.p["settle"]:
                waiting = [p for p, ok in ((greedy, printed or has_started(greedy)), (neighbour, is_ready(neighbour)))
                           if not ok]
                pending = self.diagnose(waiting)
                if now >= deadline and not waiting:   # running, but its probe printed nothing
                    pending = [{"pod": names[0], "phase": (greedy.get("status") or {}).get("phase"), "causes": [
                        {"cause": "probe_silent", "message": "the greedy pod's probe printed no result in %ds: %s" % (
                            self.p["timeout"], (log or "no output").strip()[-300:])}]}]
                definitive = all(any(c["cause"] in DEFINITIVE for c in p["causes"]) for p in pending)
                if now >= deadline or (pending and definitive):
                    return greedy, neighbour, log, pending
            time.sleep(POLL)

    def greedy(self, greedy, neighbour, log):
        """The greedy-neighbour check on the running pair: the neighbour's probe is exec'd while
        the greedy pod holds what it got. (result, table rows)."""
        ns = self.p["namespace"]
        node = greedy["spec"].get("nodeName")
        decisions = [st.binder_decision(greedy), st.binder_decision(neighbour)]
        out, err, rc = self.cluster.exec_(ns, neighbour["metadata"]["name"], st.probe_command("neighbour"),
                                          st.CONTAINER, timeout=120)
        found = {"greedy": st.parse_probe(log), "neighbour": st.parse_probe(out)}
        raw = {"greedy": log, "neighbour": "rc %s: %s" % (rc, (err or "") + (out or ""))}
        product = (found["greedy"] or found["neighbour"] or {}).get("device") or (
            ((self.cluster.node(node) or {}).get("metadata") or {}).get("labels") or {}).get("nvidia.com/gpu.product")
        sm_count = st.sm_count_for(product, self.p["gpu_sm_count"])
        check = st.check_greedy(node, self.p["fraction"], decisions, found["greedy"], found["neighbour"], sm_count,
                                raw)
        return check, st.greedy_rows(node, decisions, found["greedy"], found["neighbour"])


def write_reports(module, run):
    written = []
    for key, render in (("report_markdown", st.markdown), ("report_junit", st.junit)):
        path = module.params[key]
        if not path:
            continue
        folder = os.path.dirname(path)
        try:
            if folder and not os.path.isdir(folder):
                os.makedirs(folder)
            with open(path, "w") as handle:
                handle.write(render([run]))
        except (IOError, OSError) as exc:
            module.warn("cannot write %s %s: %s" % (key, path, exc))
            continue
        written.append(path)
    return written


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            namespace=dict(type="str", default=st.DEFAULT_NAMESPACE),
            queue=dict(type="str", default=st.DEFAULT_QUEUE),
            fraction=dict(type="float", default=st.DEFAULT_FRACTION),
            node=dict(type="str"),
            tolerate_unschedulable=dict(type="bool", default=False),
            name_suffix=dict(type="str"),
            image=dict(type="str", default=st.DEFAULT_IMAGE),
            devicequery_image=dict(type="str", default=st.DEFAULT_DEVICEQUERY_IMAGE),
            image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),
            image_pull_policy=dict(type="str", choices=["Always", "IfNotPresent", "Never"]),
            runtime_class=dict(type="str", default="nvidia"),
            scheduler_name=dict(type="str", default=st.SCHEDULER),
            measure_sm_share=dict(type="bool", default=True),
            greedy_neighbour=dict(type="bool", default=False),
            greedy_image=dict(type="str", default=st.DEFAULT_GREEDY_IMAGE),
            gpu_sm_count=dict(type="int"),
            mpsd_namespace=dict(type="str", default="gpu-fractioning"),
            mpsd_selector=dict(type="str", default="app.kubernetes.io/component=mpsd"),
            mps_server=dict(type="str", default="shared"),
            reservation_namespace=dict(type="str", default=st.RESERVATION_NAMESPACE),
            reserved_gpu_memory_mib=dict(type="int", default=st.DEFAULT_RESERVED_GPU_MEMORY_MIB),
            mps_default_percentage=dict(type="int", default=st.MPS_DEFAULT_PERCENTAGE),
            timeout=dict(type="int", default=180),
            settle=dict(type="int", default=15),
            report_markdown=dict(type="path"),
            report_junit=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    validate.refuse_bad_input(module, check_input)
    cluster_access.require_library(module)
    if params["name_suffix"] is None and params["node"]:
        params["name_suffix"] = st.run_key(params["node"]).lower().replace(".", "-").replace("_", "-")[:40].strip("-")

    run_info = {"node": params["node"], "checks": [], "rows": [], "pending": [], "passed": False,
                "expected_checks": [c for c in st.CHECKS if c != "sm_share" or params["measure_sm_share"]]
                + ([st.GREEDY_CHECK] if params["greedy_neighbour"] else [])}
    smoke = None
    try:
        smoke = Smoke(module, Cluster(params["kubeconfig"], params["context"]))
        pods, dq = st.manifests(params, smoke.run)
        greedy = st.greedy_manifests(params, smoke.run)
        leftovers = smoke.leftovers()
        if module.check_mode:
            module.exit_json(changed=bool(leftovers), would_create=pods + ([dq] if dq else []) + greedy,
                             would_delete=leftovers, deleted=[], reports=[])
        remaining = smoke.delete_all(leftovers)
        if remaining:
            raise st.SmokeError("pods of an earlier run are still terminating: %s" % ", ".join(remaining), "cluster")
        result = run_smoke(module, smoke, pods, dq, run_info, greedy)
    except st.SmokeError as exc:
        run_info["error"] = exc.msg
        run_info["reports"] = write_reports(module, run_info)
        module.fail_json(msg=exc.msg, failure=exc.failure, deleted=smoke.deleted if smoke else [],
                         pending=run_info["pending"], checks=run_info["checks"], rows=run_info["rows"],
                         reports=run_info["reports"], **exc.details)
    result["reports"] = write_reports(module, run_info)
    result["changed"] = bool(leftovers)
    for check in result["checks"]:
        for warning in check.get("warnings") or []:
            module.warn("check %s on %s: %s" % (check["check"], result["node"], warning))
    if not result["passed"]:
        failed = [c for c in result["checks"] if not c["passed"]]
        module.fail_json(msg="fraction smoke test failed on node %s: %s" % (result["node"], "; ".join(
            "check %s (GPU %s): %s" % (c["check"], c.get("gpu") or "?", c["message"]) for c in failed)),
            failure="checks_failed", **result)
    module.exit_json(**result)


def run_smoke(module, smoke, pods, dq, run_info, greedy=()):
    """Create, wait, check; the pods are deleted whatever happens (signals included)."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def interrupted(signum, _frame):
        # ansible forwards a signal to the worker's whole process group, so a second
        # one follows within milliseconds: raised during the cleanup it would end it.
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted("interrupted by signal %d" % signum)

    previous = dict((s, signal.signal(s, interrupted)) for s in signals)
    names = [m["metadata"]["name"] for m in pods + ([dq] if dq else []) + list(greedy)]
    timeout = int(module.params["timeout"])

    started = time.time()
    cause = None

    def not_ready(pending):
        run_info["pending"] = pending
        waited = int(time.time() - started)
        return st.SmokeError("pods not ready after %ss (timeout %ss): %s" % (waited, timeout, "; ".join("%s (%s): %s" % (
            p["pod"], p["phase"], " | ".join("%s: %s" % (c["cause"], c["message"]) for c in p["causes"]))
            for p in pending)), "pending")

    try:
        # the guide's order: the two pods and their checks, then (GPU given back) deviceQuery
        for manifest in pods:
            smoke.created.append(manifest["metadata"]["name"])
            smoke.cluster.create(manifest)
        objects, _none, pending = smoke.wait(pods, None)
        if pending:
            raise not_ready(pending)
        node, checks, rows = smoke.checks(objects)
        run_info.update(node=node, checks=checks, rows=rows)
        smoke.delete_all([m["metadata"]["name"] for m in pods])
        if dq is not None:
            smoke.created.append(dq["metadata"]["name"])
            smoke.cluster.create(dq)
            _none, dq_obj, pending = smoke.wait([], dq)
            if pending:
                raise not_ready(pending)
            check, dq_rows = smoke.sm_share(dq_obj)
            checks.append(check)
            rows.extend(dq_rows)
        if greedy:
            # the greedy neighbour, last: a pair on one GPU again (deviceQuery gave it back)
            smoke.delete_all([dq["metadata"]["name"]] if dq is not None else [])
            for manifest in greedy:
                smoke.created.append(manifest["metadata"]["name"])
                smoke.cluster.create(manifest)
            greedy_obj, neighbour_obj, log, pending = smoke.wait_greedy(greedy)
            if pending:
                raise not_ready(pending)
            check, greedy_rows = smoke.greedy(greedy_obj, neighbour_obj, log)
            checks.append(check)
            rows.extend(greedy_rows)
        run_info["passed"] = all(c["passed"] for c in checks)
        table = st.table(rows) + [""] + st.check_lines(checks)
        return dict(passed=run_info["passed"], checks=checks, rows=rows, table=table, node=node, pending=[],
                    deleted=smoke.deleted)
    except Interrupted as exc:
        cause = st.SmokeError("%s: the test pods were deleted" % exc, "interrupted")
        raise cause
    except BaseException as exc:
        cause = exc
        raise
    finally:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        try:
            smoke.delete_all(names)
        except st.SmokeError as exc:
            # The cause (an API server lost mid-run, often) outranks the cleanup it also broke.
            raise st.pods_left(cause, exc, [n for n in smoke.created if n not in smoke.deleted])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


if __name__ == "__main__":
    main()

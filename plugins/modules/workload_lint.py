#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: workload_lint
short_description: Check Kubernetes manifests against KAI Scheduler's fractional-pod and queue rules
version_added: 0.1.0
description:
  - "Checks pods and workloads (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, JobSet, the Kubeflow
    training jobs PyTorchJob, TFJob, XGBoostJob, JAXJob and MPIJob, RayCluster, RayJob and RayService,
    LeaderWorkerSet, PodGroup and
    C(kind: List)) from files, directories, inline objects or the live cluster, and reports one finding per
    violation with the object, the field and what to do. All sources of one run are checked together, so a
    PodGroup and the pods that join it may come from different files. A Pod with C(status) or C(metadata.uid)
    (a dump of live objects) is judged as its author wrote it, without what KAI's binder and podgrouper wrote."
  - "Rules (severity): C(scheduler-name) KAI annotations or a queue label without C(schedulerName: kai-scheduler);
    C(gpu-fraction-range) gpu-fraction not in 0 < f < 1; C(gpu-memory-value) gpu-memory not a positive whole
    number of MiB; C(fraction-and-memory) both at once; C(num-devices) gpu-fraction-num-devices not a positive
    whole number or without a share; C(fraction-with-whole-gpu) a fractional pod that also requests a whole
    nvidia.com/gpu; C(one-fractional-container) more than one container asking for a share;
    C(unknown-container) annotations naming a container the pod lacks; C(nvfractions-quantity) NvFractions
    memory annotations not quantities or request over limit; C(reserved-annotation) a user-set
    C(nvidia.com/container.*.gpus.devices); C(annotation-placement) pod annotations on the workload instead of
    its pod template; C(legacy-queue-label) C(runai/queue) instead of C(kai.scheduler/queue);
    C(queue-unknown) and C(queue-not-leaf) a queue label naming an unknown or non-leaf queue (given
    O(queues)); C(min-member-value) and C(min-member-too-large) a C(kai.scheduler/batch-min-member) that is
    not a positive whole number or is larger than the pods that can run at once; C(fraction-runs-as-root) a
    fractional pod (gpu-fraction, gpu-memory or NvFractions annotations) that may run as root: a container with
    an effective C(runAsUser: 0) (the container's securityContext wins over the pod's), or the container with
    the share without C(runAsNonRoot: true) and without a non-zero C(runAsUser) (MPS takes control commands
    from root, so such a pod could raise its own cap or delete a neighbour's namespace). All are errors except
    C(queue-label-missing) and C(queue-label-conflict), which are warnings, and C(fraction-runs-as-root), a
    warning when C(runAsNonRoot) is only unset (the image's USER, which the manifest does not show, decides)
    and an error for C(runAsUser: 0) or C(runAsNonRoot: false)."
  - "Gangs and PodGroups: C(group-sizes) a Kubeflow job without a replica type its podgrouper requires or with a
    missing or zero C(replicas) (and no C(spec.runPolicy.schedulingPolicy.minAvailable)), or a Ray worker group
    whose C(minReplicas) exceeds its C(replicas); C(min-member-ignored) (warning) C(kai.scheduler/batch-min-member)
    on a Kubeflow or Ray job, whose podgrouper does not read it; C(podgroup-spec) a PodGroup with both or a
    negative C(minMember)/C(minSubGroup), duplicate or non-DNS subgroup names, a parent that does not exist or a
    parent sized by C(minMember); C(podgroup-queue-missing) (warning) no C(spec.queue), which decides for every
    pod that joins (their queue labels are not read, so C(queue-label-missing) does not apply to them);
    C(pod-group-skip) a workload's pod joining by C(pod-group-name) without
    C(kai.scheduler/skip-podgrouper: \"true\") on the pod or an owner (an ownerless Pod needs none);
    C(podgroup-members) (warning) a PodGroup whose C(minMember) the checked manifests' pods do not reach."
  - "With O(sharing_mode): C(sharing-mode) a share asked of a cluster whose sharing is C(Disabled) (error);
    NvFractions annotations outside C(NvFractions) and a share under C(NonMemoryEnforced), which enforces no
    GPU memory (warnings)."
  - The same checks are the filter P(smshare.kai.workload_lint#filter).
  - "For CI on your own manifests: C(ansible-playbook smshare.kai.lint_workloads -e workload_lint_paths=k8s/)
    exits non-zero on any error and prints one line per finding (see the collection README)."
author:
  - smshare.kai maintainers (@smshare)
options:
  paths:
    description:
      - Files and directories to check. Directories are walked for C(*.yaml), C(*.yml) and C(*.json)
        (hidden directories skipped), in name order.
      - A file that is not YAML or JSON (binary, not UTF-8, malformed) is an error finding (rule C(parse)) that
        names the file and, for bytes that are not UTF-8, the offset; the other files are still checked. A path
        that does not exist fails the module.
      - What is not a regular file (a FIFO, socket, device or broken link) is never opened, and a file over
        O(max_file_bytes) is not read. Both are error findings (rule C(not-read)). So are the objects beyond
        O(max_objects) and C(kind) List nested deeper than O(max_list_depth) (an alias bomb).
      - YAML is read with libyaml's loader when PyYAML has it (8x faster than the pure-Python one, 1 MB of pods in 0.31 s against 2.55 s on a 2-core machine).
    type: list
    elements: path
    default: []
  max_file_bytes:
    description: Largest file read; a larger one is a C(not-read) finding.
    type: int
    default: 10485760
    version_added: 0.1.0
  max_total_bytes:
    description: Most bytes read from O(paths) in one run; files past it are C(not-read) findings.
    type: int
    default: 268435456
    version_added: 0.1.0
  max_objects:
    description: Most objects checked from O(paths) in one run (after C(kind) List is flattened).
    type: int
    default: 50000
    version_added: 0.1.0
  max_list_depth:
    description: Deepest C(kind) List nesting followed.
    type: int
    default: 16
    version_added: 0.1.0
  objects:
    description: Kubernetes objects to check, as data.
    type: list
    elements: dict
    default: []
  namespaces:
    description:
      - Namespaces whose live objects to check (needs the C(kubernetes) Python library and cluster access).
      - Pods and ReplicaSets and Jobs owned by a workload that is checked are skipped (the workload's template
        is); on a pod that is already bound, the C(gpus.devices) annotations KAI's binder wrote are not findings.
    type: list
    elements: str
    default: []
  queues:
    description:
      - The queue tree, as the inventory lists it (items with C(name) and C(parent), the P(smshare.kai.queues#role)
        role's form) or as C(scheduling.run.ai/v2) Queue objects.
      - Without it (and without O(queues_from_cluster)) the rules C(queue-unknown) and C(queue-not-leaf) are skipped.
    type: list
    elements: dict
  queues_from_cluster:
    description: Read the queue tree from the cluster's Queue objects (added to O(queues)).
    type: bool
    default: false
  sharing_mode:
    description:
      - The cluster's GPU sharing mode (kai-config's C(spec.global.gpuSharingMode), the inventory's
        C(smshare_gpu_sharing_mode)), for the rule C(sharing-mode). Unset, that rule is skipped.
    type: str
    choices: [Disabled, NonMemoryEnforced, HamiCore, NvFractions]
    version_added: 0.1.0
  sharing_mode_from_cluster:
    description:
      - Read the sharing mode from the cluster's kai-config (C(kai.scheduler/v1) Config, C(spec.global.gpuSharingMode))
        instead of O(sharing_mode), so that the rule C(sharing-mode) judges against what the cluster runs.
      - Fails when the cluster has no kai-config or it names no mode this module knows, and when O(sharing_mode) is
        given too.
    type: bool
    default: false
    version_added: 0.1.0
  report_formats:
    description:
      - Also return the findings as reports CI systems read, C(junit) in RV(junit) and C(sarif) in RV(sarif).
      - The playbook C(smshare.kai.lint_workloads) writes them to files (C(workload_lint_junit_file),
        C(workload_lint_sarif_file)).
    type: list
    elements: str
    choices: [junit, sarif]
    default: []
    version_added: 0.1.0
  report_base_dir:
    description:
      - In the SARIF report, files under this directory are named relative to it (C(uriBaseId) C(SRCROOT)), as code
        scanning services expect; others by their absolute C(file://) URI. Usually the repository's root.
    type: path
    version_added: 0.1.0
  fail_on:
    description:
      - V(error) fails when any error is found, V(warning) when any finding is, V(never) only reports.
    type: str
    choices: [error, warning, never]
    default: error
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
  - smshare.kai.cluster_access
notes:
  - "Runs where the manifests are; in CI that is the runner itself (C(connection: local))."
seealso:
  - plugin: smshare.kai.workload_lint
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Check the team's manifests against the inventory's queue tree
  smshare.kai.workload_lint:
    paths:
      - k8s/
      - jobs/train.yaml
    queues: "{{ smshare_queues }}"

- name: Check what runs in two namespaces against the cluster's queues, without failing
  smshare.kai.workload_lint:
    namespaces: [gpu-trial, team-ml]
    queues_from_cluster: true
    sharing_mode_from_cluster: true
    kubeconfig: /etc/kubernetes/admin.conf
    fail_on: never
  register: lint

- name: Show the findings, one line each
  ansible.builtin.debug:
    msg: "{{ lint.report }}"
"""

RETURN = r"""
findings:
  description: One entry per violation.
  returned: always
  type: list
  elements: dict
  contains:
    rule:
      description: The rule's name (see the description).
      type: str
      sample: gpu-fraction-range
    severity:
      description: C(error) or C(warning).
      type: str
    object:
      description: Kind, namespace and name of the object.
      type: str
      sample: Pod gpu-trial/half-gpu
    field:
      description: Path of the field inside the object.
      type: str
      sample: metadata.annotations[gpu-fraction]
    message:
      description: What is wrong and what to do.
      type: str
    source:
      description: File (with C(#N) for the Nth document), C(objects[N]) or C(cluster).
      type: str
    text:
      description: The finding on one line, as in RV(report).
      type: str
report:
  description: One line per finding, errors first.
  returned: always
  type: list
  elements: str
  sample: ["ERROR: k8s/pod.yaml: Pod gpu-trial/half-gpu: metadata.annotations[gpu-fraction]: '1.5' must be a number
            greater than 0 and less than 1 ... [gpu-fraction-range]"]
summary:
  description: Counts on one line.
  returned: always
  type: str
  sample: 1 error, 0 warnings in 3 objects checked
error_count:
  description: Number of error findings.
  returned: always
  type: int
warning_count:
  description: Number of warning findings.
  returned: always
  type: int
checked:
  description: Number of objects checked.
  returned: always
  type: int
files:
  description: The files read.
  returned: always
  type: list
  elements: str
junit:
  description:
    - The findings as a JUnit XML document, with O(report_formats=junit). One test case per rule of the table; a
      rule's findings at or above O(fail_on) are its C(failure), the others its C(system-out).
  returned: when asked
  type: str
sarif:
  description:
    - The findings as a SARIF 2.1.0 log, with O(report_formats=sarif). One result per finding, each rule of the table
      in the tool's C(rules); a finding points at its file and names its object and field as a logical location
      (the linter reads objects, not lines).
  returned: when asked
  type: dict
sharing_mode:
  description: The sharing mode the rule C(sharing-mode) judged against (O(sharing_mode) or the cluster's), none when unset.
  returned: always
  type: str
  sample: NvFractions
failure:
  description: >-
    Why the module failed: V(violations) (findings at or above O(fail_on)), V(bad_input) (a path that does not
    exist), V(missing_library) (the kubernetes library for live objects), V(cluster) (the API server refused
    or could not be reached).
  returned: failure
  type: str
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, lint_reports, queue_tree
from ansible_collections.smshare.kai.plugins.module_utils import workload_rules

try:
    import yaml
except ImportError:  # pragma: no cover - ansible-core requires PyYAML
    yaml = None
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    YAML_IMPORT_ERROR = None

try:
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
except ImportError:  # cluster_access.require_library() reports it
    DynamicClient = ResourceNotFoundError = None

# (apiVersion, kind) read from each namespace, in this order; optional ones may be absent
LIVE_KINDS = (   # (apiVersion, kind, required); a kind is read from the first version served
    ("v1", "Pod", True),
    ("apps/v1", "Deployment", True),
    ("apps/v1", "StatefulSet", True),
    ("apps/v1", "DaemonSet", True),
    ("apps/v1", "ReplicaSet", True),
    ("batch/v1", "Job", True),
    ("batch/v1", "CronJob", False),
    ("batch/v1beta1", "CronJob", False),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", False),
    ("kubeflow.org/v1", "PyTorchJob", False),
    ("kubeflow.org/v1", "TFJob", False),
    ("kubeflow.org/v1", "XGBoostJob", False),
    ("kubeflow.org/v1", "JAXJob", False),
    ("kubeflow.org/v2beta1", "MPIJob", False),
    ("kubeflow.org/v1", "MPIJob", False),
    ("ray.io/v1", "RayJob", False),
    ("ray.io/v1", "RayCluster", False),
    ("ray.io/v1", "RayService", False),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", False),
    ("scheduling.run.ai/v2alpha2", "PodGroup", False),
)


class ClusterError(Exception):
    pass


def load_all(text):
    """yaml.safe_load_all, with libyaml's loader when PyYAML was built with it."""
    return yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader)


def _connect(api):
    """The dynamic client (it reads the API's discovery): a failure here is the server, not the kubeconfig."""
    try:
        return DynamicClient(api)
    except Exception as exc:  # pylint: disable=broad-except
        raise ClusterError("cannot reach the API server at %s: %s" % (api.configuration.host, " ".join(
            str(exc).split())[:300]))


def api_client(kubeconfig, context):
    try:
        return _connect(cluster_access.api_client(kubeconfig, context))
    except cluster_access.AccessError as exc:
        raise ClusterError(str(exc))


def _list(client, api_version, kind, namespace=None):
    try:
        resource = client.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        return None
    try:
        return resource.get(namespace=namespace).to_dict().get("items") or []
    except Exception as exc:  # pylint: disable=broad-except
        where = " in %s" % namespace if namespace else ""
        raise ClusterError("listing %s %s%s failed: %s" % (api_version, kind, where, exc))


def cluster_sharing_mode(client):
    """kai-config's spec.global.gpuSharingMode."""
    api_version, kind, name = workload_rules.KAI_CONFIG
    configs = _list(client, api_version, kind)
    if configs is None:
        raise ClusterError("the cluster has no %s %s resource: is KAI Scheduler installed? Set sharing_mode instead"
                           % (api_version, kind))
    config = next((c for c in configs if (c.get("metadata") or {}).get("name") == name), None)
    if config is None:
        raise ClusterError("the cluster has no %s (%s %s): KAI's chart creates it; set sharing_mode instead"
                           % (name, api_version, kind))
    mode = ((config.get("spec") or {}).get("global") or {}).get("gpuSharingMode")
    if mode not in workload_rules.SHARING_MODES:
        raise ClusterError("%s's spec.global.gpuSharingMode is %s, not one of %s (the mode is case-sensitive): fix "
                           "the release values or set sharing_mode" % (
                               name, "unset" if mode is None else repr(mode), ", ".join(workload_rules.SHARING_MODES)))
    return mode


def live_objects(client, namespaces):
    objects = []
    for namespace in namespaces:
        found = {}
        for api_version, kind, required in LIVE_KINDS:
            if kind in found:
                continue
            items = _list(client, api_version, kind, namespace)
            if items is None:
                if required:
                    raise ClusterError("the API server does not serve %s %s" % (api_version, kind))
                continue
            for item in items:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
            found.setdefault(kind, []).extend(items)
        checked_kinds = set(entry[1] for entry in LIVE_KINDS)
        for kind in [entry[1] for entry in LIVE_KINDS]:
            for item in found.pop(kind, []):
                if not workload_rules.owned_by(item, checked_kinds):
                    objects.append(workload_rules.live_view(item))
    return objects


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            paths=dict(type="list", elements="path", default=[]),
            objects=dict(type="list", elements="dict", default=[]),
            namespaces=dict(type="list", elements="str", default=[]),
            queues=dict(type="list", elements="dict"),
            queues_from_cluster=dict(type="bool", default=False),
            fail_on=dict(type="str", choices=["error", "warning", "never"], default="error"),
            sharing_mode=dict(type="str", choices=list(workload_rules.SHARING_MODES)),
            sharing_mode_from_cluster=dict(type="bool", default=False),
            report_formats=dict(type="list", elements="str", choices=["junit", "sarif"], default=[]),
            report_base_dir=dict(type="path"),
            max_file_bytes=dict(type="int", default=10 * 1024 * 1024),
            max_total_bytes=dict(type="int", default=256 * 1024 * 1024),
            max_objects=dict(type="int", default=50000),
            max_list_depth=dict(type="int", default=16),
        ),
        supports_check_mode=True,
    )
    params = module.params
    from_cluster = params["namespaces"] or params["queues_from_cluster"] or params["sharing_mode_from_cluster"]
    if yaml is None:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR,
                         failure="missing_library")
    if from_cluster:
        cluster_access.require_library(module, "for namespaces or the *_from_cluster options")
    if params["sharing_mode"] and params["sharing_mode_from_cluster"]:
        module.fail_json(msg="sharing_mode=%s and sharing_mode_from_cluster=true: give the mode or read it from the "
                         "cluster, not both" % params["sharing_mode"], failure="bad_input", parameter="sharing_mode")
    if not (params["paths"] or params["objects"] or params["namespaces"]):
        module.fail_json(msg="nothing to check: give paths, objects or namespaces", failure="bad_input",
                         parameter="paths")
    for index, namespace in enumerate(params["namespaces"]):
        if not queue_tree.NAME_RE.fullmatch(namespace or "") or "." in namespace:
            module.fail_json(msg="namespaces[%d]=%r: must be a namespace name, for example gpu-trial" % (
                index, namespace), failure="bad_input", parameter="namespaces")

    for name in ("max_file_bytes", "max_total_bytes", "max_objects", "max_list_depth"):
        if params[name] < 1:
            module.fail_json(msg="%s=%d: must be 1 or more" % (name, params[name]), failure="bad_input",
                             parameter=name)
    limits = workload_rules.Limits(params["max_file_bytes"], params["max_total_bytes"], params["max_objects"],
                                   params["max_list_depth"])

    queues = list(params["queues"]) if params["queues"] is not None else None
    findings, checked, files = [], 0, []
    sharing_mode = params["sharing_mode"]
    try:
        client = None
        if from_cluster:
            client = api_client(params["kubeconfig"], params["context"])
        if params["sharing_mode_from_cluster"]:
            sharing_mode = cluster_sharing_mode(client)
        if params["queues_from_cluster"]:
            cluster_queues = _list(client, queue_tree.API_VERSION, queue_tree.KIND)
            if cluster_queues is None:
                raise ClusterError("the cluster has no %s Queue resource: is KAI Scheduler installed?"
                                   % queue_tree.API_VERSION)
            queues = (queues or []) + cluster_queues
        # one run over every source: a PodGroup and the pods that join it may come from different ones
        run = workload_rules.Run(None if queues is None else queue_tree.names_and_parents(queues), sharing_mode)
        try:
            findings, checked, files = workload_rules.lint_files(params["paths"], load_all, (yaml.YAMLError,),
                                                                 limits=limits, run=run)
        except (OSError, IOError) as exc:
            module.fail_json(msg="paths: %s" % exc, failure="bad_input", parameter="paths")
        for index, obj in enumerate(params["objects"]):
            for item in workload_rules.expand([obj]):
                checked += 1
                findings.extend(run.check(item, "objects[%d]" % index))
        if params["namespaces"]:
            objects = live_objects(client, params["namespaces"])
            checked += len(objects)
            for obj in objects:
                findings.extend(run.check(obj, "cluster"))
        findings.extend(run.finish())
    except ClusterError as exc:
        module.fail_json(msg=str(exc), failure="cluster")

    if not checked:
        module.warn("no Kubernetes objects were found to check: are the paths or namespaces right?")
    errors = len([f for f in findings if f.severity == workload_rules.ERROR])
    result = dict(
        changed=False,
        findings=[f.as_dict() for f in findings],
        report=workload_rules.report(findings),
        summary=workload_rules.summary(findings, checked),
        error_count=errors,
        warning_count=len(findings) - errors,
        checked=checked,
        files=files,
        sharing_mode=sharing_mode,
    )
    if "junit" in params["report_formats"]:
        result["junit"] = lint_reports.junit(result["findings"], workload_rules.RULES, checked, params["fail_on"])
    if "sarif" in params["report_formats"]:
        base = os.path.realpath(params["report_base_dir"]) if params["report_base_dir"] else None
        result["sarif"] = lint_reports.sarif(result["findings"], workload_rules.RULES, base)
    fail_on = params["fail_on"]
    if (fail_on == "error" and errors) or (fail_on == "warning" and findings):
        module.fail_json(msg="workload_lint: %s:\n%s" % (result["summary"], "\n".join(result["report"])),
                         failure="violations", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

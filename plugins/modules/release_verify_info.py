#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: release_verify_info
short_description: Verify an installed KAI-Scheduler or gpu-fractioning release in one run, waiting for each check
version_added: 0.1.0
description:
  - "The install guide's checks of one of the forks' releases, read in one module run. Both charts' checks include
    every Deployment of the release's namespace Available (after a failed wait the namespace's pods and events name
    the image pulls that fail)."
  - "C(kai-scheduler), in this order: kai-config (C(kai.scheduler/v1) Config) reporting the services deployed
    (waiting for the Deployments alone could end while only the operator's own exists), the Deployments,
    every pod Running with this build's image at the recorded digest, and kai-config carrying the sharing mode
    with its dependencies fulfilled (or missing only the GpuFractioningConfig the gpu-fractioning release brings)."
  - "C(gpu-fractioning), in this order: the Deployments, the API serving
    C(GpuFractioningConfig), the config C(default) (not one being deleted), the operator's DaemonSets created
    and ready on every node they target, the config's C(Ready) condition, the node condition
    C(gpu-fractioning.nvidia.com/Ready) on every node the config selects, mpsd's startup lines (multi-user mode
    and the default namespace cap, from the pod's log and the MPS control daemon's own log), each pod's image
    against the build's, and kai-config's C(DependenciesFulfilled)."
  - "Each check that waits polls every O(poll_interval) seconds for up to O(timeout) seconds; the checks run in
    that order and the first that fails ends the run. A DaemonSet that is not ready is named with the guide's
    troubleshooting row its containers' last log lines show."
  - "Read-only. A failing check is data (RV(ok), RV(failed_check), RV(message)), not a module failure: the role
    asserts it. The module fails only when the cluster cannot be reached or a read outside a wait fails."
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.cluster_access
attributes:
  check_mode:
    support: full
    details: Reads only, in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  chart:
    description: Which fork's release to verify.
    type: str
    required: true
    choices: [kai-scheduler, gpu-fractioning]
  namespace:
    description: The release's namespace; default the chart's name.
    type: str
  release_name:
    description: The release's name (named in the advice); default the chart's name.
    type: str
  deployments_hint:
    description: Ends the advice when a Deployment is not Available (after C(describe pod POD)).
    type: str
    default: ""
  gpu_sharing_mode:
    description: C(kai-scheduler) only, the C(gpuSharingMode) kai-config must carry.
    type: str
    default: NvFractions
  timeout:
    description: Seconds each waiting check waits at most.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two reads of a waiting check.
    type: int
    default: 5
  components:
    description: C(gpu-fractioning) only. The DaemonSets' components (label C(app.kubernetes.io/component)) the operator must create.
    type: list
    elements: str
    default: [mpsd, fractiond]
  cri_socket_path:
    description: C(gpu-fractioning) only. The CRI socket the release was given (named in the advice).
    type: str
    default: /run/containerd/containerd.sock
  nri_socket_path:
    description: C(gpu-fractioning) only. The NRI socket the release was given (named in the advice).
    type: str
    default: /var/run/nri/nri.sock
  node_selector:
    description: C(gpu-fractioning) only. The label selector of the GPU nodes (their GPU count sizes mpsd's memory in the advice).
    type: str
    default: nvidia.com/gpu.present=true
  failure_log_lines:
    description: C(gpu-fractioning) only. The last log lines read from each daemon container that is not ready.
    type: int
    default: 50
  mps_control_log:
    description: C(gpu-fractioning) only. The MPS control daemon's log file in the mpsd container.
    type: str
    default: /var/log/nvidia-mps/control.log
  mps_start_pattern:
    description: C(gpu-fractioning) only. A regular expression for the line that starts a run of the MPS control daemon in its log.
    type: str
    default: Starting control daemon
  default_namespace_percentage:
    description: C(gpu-fractioning) only. The default namespace's cap mpsd must log.
    type: float
    default: 10
  image_base:
    description: C(<registry>/kai-scheduler) or C(<registry>/kai-gpu-fractioning), the repository every image must be under.
    type: str
    required: true
  tag:
    description: The build's image tag.
    type: str
    required: true
  manifest:
    description: The image manifest the images role wrote (its digests are compared); none compares no digest.
    type: dict
  image_manifest_path:
    description: Where that manifest is (named in the advice).
    type: str
    default: ""
  mpsd_memory_limit:
    description: C(gpu-fractioning) only. mpsd's memory limit the release was given (named when mpsd runs out of memory).
    type: str
  gpu_operator_minimum_version:
    description: C(gpu-fractioning) only. The release's C(gpuOperator.minimumVersion) (named when the config reports the GPU Operator too old).
    type: str
  check_kai_config:
    description: C(gpu-fractioning) only. Also wait for kai-config (C(kai.scheduler/v1) Config) to report C(DependenciesFulfilled).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Verify the release
  smshare.kai.release_verify_info:
    chart: gpu-fractioning
    image_base: registry.example.com:5000/kai-gpu-fractioning
    tag: smshare-44d1d0a-af0544e
  register: verify

- name: Check every check passed
  ansible.builtin.assert:
    that: verify.ok
    fail_msg: "{{ verify.message }}"
"""

RETURN = r"""
ok:
  description: Every check passed.
  returned: success
  type: bool
failed_check:
  description: The name of the first check that failed, none when all passed.
  returned: success
  type: str
  sample: daemonsets_ready
message:
  description: The failing check's message (what is wrong and what to do), or every check's summary, one line each.
  returned: success
  type: str
report:
  description: The tables of what the checks saw, as text lines (Deployments aside).
  returned: success
  type: list
  elements: str
checks:
  description:
    - The checks that ran, in order, C(name) one of C(kai_config_deployed), C(deployments), C(pods),
      C(kai_config_sharing) (C(kai-scheduler)), or C(deployments), C(config_api), C(daemonsets_created),
      C(daemonsets_ready), C(config_ready), C(nodes_ready), C(mpsd_startup), C(images), C(kai_config)
      (C(gpu-fractioning)).
    - C(rows) are what the check saw (Deployments, DaemonSets with desired and ready, conditions, nodes, pods and
      images); C(config_ready) also has C(summary), the config's conditions in one line.
  returned: success
  type: list
  elements: dict
  sample: [{"name": "nodes_ready", "ok": true, "message": "1 node(s) report gpu-fractioning.nvidia.com/Ready=True: gpu-1",
            "rows": [{"node": "gpu-1", "status": "True", "reason": "", "message": "", "ok": true}]}]
failure:
  description: >-
    Why the module failed - C(bad_input) (with RV(parameter)), C(missing_library), or C(cluster) (no client, or a read that kept failing).
    A failed check is no module failure: RV(ok) is false and RV(failed_check) names it.
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
"""

import re
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, plain, readiness, registry, validate
from ansible_collections.smshare.kai.plugins.module_utils.release_verify import ReadError, verify
from ansible_collections.smshare.kai.plugins.module_utils.cluster_access import kube_client as kclient

try:
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError
except ImportError:  # cluster_access.require_library() reports it
    DynamicClient = DynamicApiError = NotFoundError = ResourceNotFoundError = None

REQUEST_TIMEOUT = cluster_access.REQUEST_TIMEOUT


class ClusterReader(object):
    """The reads the verification makes, as plain objects (the API's JSON, like k8s_info's)."""

    def __init__(self, api):
        self.api, self._core = api, None
        try:
            self.client = DynamicClient(api)
            # The discovery cache outlives a run: a CRD's versions may have changed since.
            self.client.resources.invalidate_cache()
        except Exception as exc:  # pylint: disable=broad-except
            raise ReadError("discovery at %s: %s" % (api.configuration.host, exc))

    @property
    def core(self):
        """CoreV1Api, built (and imported: about a second on a busy controller)
        only for a log or an exec, which a healthy kai-scheduler release never needs."""
        if self._core is None:
            self._core = kclient.CoreV1Api(self.api)
        return self._core

    def api_version_of(self, kind):
        """The group/version serving kind, the preferred version first; None if none does."""
        try:
            found = self.client.resources.search(kind=kind)
        except Exception as exc:  # pylint: disable=broad-except
            raise ReadError("discovery of %s: %s" % (kind, exc))
        found = sorted((not r.preferred, r.group_version) for r in found if "/" not in (r.name or ""))
        return found[0][1] if found else None

    def list(self, api_version, kind, namespace=None, name=None, label_selector=None):
        what = "%s %s%s" % (kind, name or "", " in " + namespace if namespace else "")
        try:
            resource = self.client.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:   # no CRD serves it: no object, the check says what is missing
            return []
        except Exception as exc:  # pylint: disable=broad-except
            raise ReadError("discovery of %s: %s" % (kind, exc))
        try:
            found = resource.get(name=name, namespace=namespace if resource.namespaced else None,
                                 label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT).to_dict()
        except NotFoundError:
            return []
        except DynamicApiError as exc:
            raise ReadError("reading %s: %s %s" % (what, exc.status, exc.reason))
        except Exception as exc:  # pylint: disable=broad-except
            raise ReadError("reading %s: %s" % (what, exc))
        return [found] if name else found.get("items") or []

    def log(self, namespace, pod, container, previous=False, tail_lines=None):
        """The log's lines, as the kubelet sent them (not decoded as JSON when a line is JSON)."""
        kwargs = {"container": container, "previous": previous, "_request_timeout": REQUEST_TIMEOUT,
                  "_preload_content": False}
        if tail_lines:
            kwargs["tail_lines"] = tail_lines
        try:
            data = self.core.read_namespaced_pod_log(pod, namespace, **kwargs).data
        except Exception as exc:  # pylint: disable=broad-except
            raise ReadError("logs of %s/%s (%s): %s" % (namespace, pod, container, getattr(exc, "reason", exc)))
        return data.decode("utf-8", "replace").splitlines()

    def exec_(self, namespace, pod, container, command):
        try:
            return cluster_access.exec_in_pod(self.core, namespace, pod, command, container)[0]
        except Exception as exc:  # pylint: disable=broad-except
            raise ReadError("exec %s in %s/%s: %s" % (" ".join(command), namespace, pod, exc))


ARGUMENT_DEFAULTS = {"cri_socket_path": "/run/containerd/containerd.sock", "nri_socket_path": "/var/run/nri/nri.sock",
                     "mps_control_log": "/var/log/nvidia-mps/control.log", "gpu_sharing_mode": "NvFractions",
                     "node_selector": "nvidia.com/gpu.present=true", "mps_start_pattern": "Starting control daemon"}


def check_input(params):
    """Every parameter rule, before the cluster is asked (raises validate.BadInput)."""
    validate.integer("timeout", params["timeout"], example="300 (seconds each check waits)", minimum=1)
    validate.integer("poll_interval", params["poll_interval"], example="5 (seconds)", minimum=1)
    validate.integer("failure_log_lines", params["failure_log_lines"], example="50", minimum=1)
    validate.namespace("namespace", params["namespace"], example=params["chart"])
    validate.text("image_base", params["image_base"], example="registry.example.com:5000/kai-scheduler",
                  pattern=r"[^\s@]+[^\s@/]", rule="must be a repository prefix, without spaces, digest or final /")
    validate.text("tag", params["tag"], example="smshare-44d1d0a-af0544e", pattern=registry.TAG_RE,
                  rule="must be an image tag (letters, digits, _ . -; at most 128)")
    validate.text("release_name", params["release_name"], example=params["chart"], max_length=53,
                  pattern=r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", rule="must be a helm release name")
    validate.items("components", params["components"], example="[mpsd, fractiond]", each=lambda name, value: (
        validate.text(name, value, example="mpsd", pattern=r"[a-z0-9]([-a-z0-9]*[a-z0-9])?",
                      rule="must be a label value (lower case letters, digits and -)")))
    # The control log is read in the mpsd container; the other paths are only named in advice.
    validate.path("mps_control_log", params["mps_control_log"], example=ARGUMENT_DEFAULTS["mps_control_log"])
    for name in ("cri_socket_path", "nri_socket_path", "gpu_sharing_mode", "node_selector", "mps_start_pattern"):
        validate.text(name, params[name], example=ARGUMENT_DEFAULTS[name])
    for name in ("deployments_hint", "image_manifest_path", "mpsd_memory_limit", "gpu_operator_minimum_version"):
        validate.text(name, params[name], example="(see the documentation)", required=False)
    try:
        re.compile(params["mps_start_pattern"])
    except re.error as exc:
        raise validate.BadInput("mps_start_pattern", params["mps_start_pattern"],
                                "must be a regular expression (%s)" % exc, ARGUMENT_DEFAULTS["mps_start_pattern"])
    if not 0 < params["default_namespace_percentage"] <= 100:
        raise validate.BadInput("default_namespace_percentage", params["default_namespace_percentage"],
                                "must be a percentage above 0, at most 100", "10")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_access.ARGUMENT_SPEC,
            chart=dict(type="str", required=True, choices=["kai-scheduler", "gpu-fractioning"]),
            namespace=dict(type="str"),
            release_name=dict(type="str"),
            deployments_hint=dict(type="str", default=""),
            gpu_sharing_mode=dict(type="str", default=ARGUMENT_DEFAULTS["gpu_sharing_mode"]),
            timeout=dict(type="int", default=300),
            poll_interval=dict(type="int", default=5),
            components=dict(type="list", elements="str", default=["mpsd", "fractiond"]),
            cri_socket_path=dict(type="str", default=ARGUMENT_DEFAULTS["cri_socket_path"]),
            nri_socket_path=dict(type="str", default=ARGUMENT_DEFAULTS["nri_socket_path"]),
            node_selector=dict(type="str", default=ARGUMENT_DEFAULTS["node_selector"]),
            failure_log_lines=dict(type="int", default=50),
            mps_control_log=dict(type="str", default=ARGUMENT_DEFAULTS["mps_control_log"]),
            mps_start_pattern=dict(type="str", default=ARGUMENT_DEFAULTS["mps_start_pattern"]),
            default_namespace_percentage=dict(type="float", default=10),
            image_base=dict(type="str", required=True),
            tag=dict(type="str", required=True),
            manifest=dict(type="dict"),
            image_manifest_path=dict(type="str", default=""),
            mpsd_memory_limit=dict(type="str"),
            gpu_operator_minimum_version=dict(type="str"),
            check_kai_config=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name in ("namespace", "release_name"):
        params[name] = params[name] or params["chart"]
    cluster_access.require_library(module)
    validate.refuse_bad_input(module, check_input)
    # Discovery takes no timeout of its own (an exec is bounded by cluster_access.exec_in_pod).
    socket.setdefaulttimeout(REQUEST_TIMEOUT)
    settings = dict(params, release=params["release_name"], symptom_settings={
        "mpsd_memory_limit": params["mpsd_memory_limit"], "nri_socket_path": params["nri_socket_path"],
        "cri_socket_path": params["cri_socket_path"],
        "gpu_operator_minimum_version": params["gpu_operator_minimum_version"]})
    percentage = params["default_namespace_percentage"]
    settings["default_namespace_percentage"] = int(percentage) if percentage == int(percentage) else percentage
    try:
        reader = ClusterReader(cluster_access.api_client(params["kubeconfig"], params["context"]))
        result = verify(reader, settings)
    except cluster_access.AccessError as exc:
        module.fail_json(msg=str(exc), failure="cluster")
    except ReadError as exc:
        module.fail_json(msg=readiness.after_failed_read({}, plain.one_line(exc))["message"], failure="cluster")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

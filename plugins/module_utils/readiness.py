# -*- coding: utf-8 -*-
# Apache-2.0
"""The cluster roles' waits and their checks, one predicate each.

A role waits for a state (`k8s_info` with `until:`), then asserts it with a
message saying what is wrong and what to do. Each function here is both: it
returns {ok, rows, message} from the objects the wait read, the wait's `until`
reads `ok`, the assert after it asserts `ok` and prints `message` (the failure
when ok is false, a one-line summary when it is true). `rows` is what the check
saw, one entry per object. Pure functions of their inputs: the release checks
run them in the release_verify_info module (module_utils/release_verify.py), the
other waits as filters (plugins/filter/readiness.py) through a variable computed
once, so the rule is written once."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible_collections.smshare.kai.plugins.module_utils import fractioning_checks
from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks
from ansible_collections.smshare.kai.plugins.module_utils.plain import one_line
from ansible_collections.smshare.kai.plugins.module_utils.object_status import (
    condition_summary, conditions, daemonsets_ready, deployments_ready, nodes_condition)

# The nodes the fork's DaemonSets select (its chart's nodeSelector and the
# upgrade-state rule of its operator): named when a DaemonSet selects none.
NO_NODE_MATCHES = ("no node matches: the daemons run on nodes labelled nvidia.com/gpu.deploy.client=true whose "
                   "nvidia.com/gpu-driver-upgrade-state is unset or upgrade-done")
NODE_CONDITION = "gpu-fractioning.nvidia.com/Ready"
# What the KAI operator says while no GpuFractioningConfig exists (before the gpu_fractioning role).
FRACTIONING_CONFIG_MISSING = "GpuFractioningConfig not found"


def result(ok, rows, message):
    return {"ok": bool(ok), "rows": rows, "message": message}


def _name(obj):
    return ((obj or {}).get("metadata") or {}).get("name")


def _missing(wanted, found):
    """The entries of `wanted` not in `found`, in wanted's order."""
    found = set(found)
    return [w for w in wanted or [] if w not in found]


# ---------------------------------------------------------------- any chart release
def deployments_available(deployments, namespace, timeout, hint="", pods=None, events=None):
    """Every Deployment of the release's namespace rolled out and Available (at
    least one). rows: deployments_ready's. hint ends the advice on a failure
    (a parenthesis after `describe pod POD`). pods and events (the namespace's,
    read once the wait has failed) name the image pulls that fail."""
    rows = deployments_ready(deployments)
    bad = [r for r in rows if not r["ok"]]
    look = ("Look at the pods: kubectl -n %s get pods; kubectl -n %s describe pod POD%s."
            % (namespace, namespace, " " + hint if hint else ""))
    if not rows:
        return result(False, rows, "No deployment in namespace %s. %s" % (namespace, look))
    if bad:
        pulls = _failing_pulls([r["name"] for r in bad], pods or [], events or [])
        return result(False, rows, "Not Available after %s s: %s.%s %s" % (
            timeout, "; ".join("%s: %s" % (r["name"], r["reason"]) for r in bad),
            " Image pulls fail: %s. Check the image and its tag, that the nodes reach the registry (its "
            "certificate, the pull secret's login), and the registry itself; the kubelet retries the pull, so "
            "run again once it is fixed." % "; ".join(pulls) if pulls else "", look))
    return result(True, rows, "%d deployments Available: %s" % (len(rows), ", ".join(str(r["name"]) for r in rows)))


def _owning_deployment(pod):
    """The Deployment of a pod its ReplicaSet made (<deployment>-<hash>), else None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet" and "-" in (ref.get("name") or ""):
            return ref["name"].rsplit("-", 1)[0]
    return None


def _failing_pulls(names, pods, events):
    """'pod P container C: ImagePullBackOff <what the kubelet and the registry said> (failed
    pulls: N)' for each container of the named Deployments' pods that waits on a pull."""
    found = []
    for pod in pods:
        if _owning_deployment(pod) not in names:
            continue
        status = pod.get("status") or {}
        name = _name(pod)
        own = smoke_checks.events_of(pod, [e for e in events if (e.get("involvedObject") or {}).get("kind") == "Pod"
                                           and (e.get("involvedObject") or {}).get("name") == name])
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            pull = smoke_checks.pull_failure(cs, own)
            if pull:
                found.append("pod %s container %s: %s %s (failed pulls: %d)" % (
                    name, cs.get("name"), pull["reason"], pull["said"], pull["tries"]))
    return found


def _condition_rows(obj):
    return [dict(value, type=kind) for kind, value in conditions(obj).items()]


# ---------------------------------------------------------------- kai_scheduler
def kai_config_deployed(configs, namespace, release, timeout):
    """kai-config exists and reports Deployed=True (the operator deployed the
    services). rows: the config's conditions."""
    config = (configs or [None])[0]
    if config is None:
        return result(False, [], (
            "kai-config (kai.scheduler/v1 Config) does not exist after %s s: the chart's post-install hook applies "
            "it. Read the hook job's logs in %s and `helm status %s -n %s`." % (timeout, namespace, release, namespace)))
    rows = _condition_rows(config)
    if (conditions(config).get("Deployed") or {}).get("status") != "True":
        return result(False, rows, (
            "kai-config does not report Deployed=True after %s s (%s). Read the kai-operator logs: kubectl -n %s "
            "logs deploy/kai-operator." % (timeout, condition_summary(config), namespace)))
    return result(True, rows, "kai-config reports Deployed=True")


def kai_config_dependencies(configs, timeout):
    """kai-config reports DependenciesFulfilled=True (its operator found the
    GpuFractioningConfig). rows: the config's conditions."""
    config = (configs or [None])[0]
    rows = _condition_rows(config)
    deps = conditions(config).get("DependenciesFulfilled")
    if (deps or {}).get("status") == "True":
        return result(True, rows, "kai-config reports DependenciesFulfilled=True")
    deps = deps or {"status": "missing", "reason": "", "message": "kai-config not found"}
    return result(False, rows, (
        "kai-config reports DependenciesFulfilled=%s (%s: %s) after %s s, although GpuFractioningConfig default is "
        "Ready. Read the kai-operator logs; set gpu_fractioning_check_kai_config=false where KAI-Scheduler is "
        "managed elsewhere." % (deps["status"], deps["reason"], deps["message"], timeout)))


def kai_config_sharing(configs, sharing_mode):
    """kai_scheduler's check after its install: kai-config carries the sharing
    mode the release values set, and DependenciesFulfilled is True, or False for
    the one reason expected before the gpu_fractioning role ran (the operator
    has no GpuFractioningConfig yet). rows: the config's conditions."""
    config = (configs or [None])[0] or {}
    rows = _condition_rows(config)
    mode = ((config.get("spec") or {}).get("global") or {}).get("gpuSharingMode") or ""
    deps = conditions(config).get("DependenciesFulfilled") or {}
    status, reason, message = (str(deps.get(k) or "") for k in ("status", "reason", "message"))
    waiting = status == "False" and FRACTIONING_CONFIG_MISSING in message
    problems = []
    if mode != sharing_mode:
        problems.append("kai-config reports gpuSharingMode %s, not %s: the release values did not reach the "
                        "Config." % (mode or "(unset)", sharing_mode))
    if status != "True" and not waiting:
        problems.append('kai-config reports DependenciesFulfilled=%s (%s: %s). Only "%s" is expected before the '
                        "gpu_fractioning role runs; fix what it names." % (
                            status or "missing", reason, message, FRACTIONING_CONFIG_MISSING))
    if problems:
        return result(False, rows, " ".join(problems))
    return result(True, rows, "kai-config: gpuSharingMode %s, DependenciesFulfilled=%s%s" % (
        sharing_mode, status, " (%s: expected until the gpu_fractioning role ran)" % FRACTIONING_CONFIG_MISSING
        if waiting else ""))


# ---------------------------------------------------------------- gpu_fractioning
def fractioning_daemonsets_created(daemonsets, config, components, namespace, timeout, operators=None):
    """The operator created a DaemonSet for each of `components` for the current
    GpuFractioningConfig (config: the config object, or None). rows:
    daemonsets_ready's of the current DaemonSets, without pods. operators: the
    namespace's Deployments, whose first names the operator in the advice."""
    rows = daemonsets_ready(fractioning_checks.current_daemonsets(daemonsets, config), [])
    missing = _missing(components, [r["component"] for r in rows])
    if not missing:
        return result(True, rows, "DaemonSets of GpuFractioningConfig default: %s" % ", ".join(
            str(r["name"]) for r in rows))
    operator = ([_name(d) for d in operators or [] if _name(d)] or ["OPERATOR"])[0]
    return result(False, rows, (
        "After %s s namespace %s has no DaemonSet for %s of the current GpuFractioningConfig default (found: %s). "
        "The operator creates them: read its logs (kubectl -n %s logs deploy/%s) and the GpuFractioningConfig's "
        "conditions." % (timeout, namespace, ", ".join(missing),
                         ", ".join(str(_name(d)) for d in daemonsets or []) or "none", namespace, operator)))


def _daemonset_line(row):
    line = "DaemonSet %s: %s/%s ready" % (row["name"], row["ready"], row["desired"])
    if row["desired"] == 0:
        line += " (%s)" % NO_NODE_MATCHES
    line += "".join("; not ready on %s: %s (%s)" % (p["node"], p["pod"], p["reason"]) for p in row["not_ready"])
    if row["missing"] > 0:
        line += "; %s pod(s) not created" % row["missing"]
    return line + "."


def fractioning_daemonsets_ready(daemonsets, config, pods, symptoms, namespace, cri_socket_path, nri_socket_path):
    """Every DaemonSet of the current GpuFractioningConfig has desired == ready
    (at least one node) and, once its pods are read, each of them ready. rows:
    daemonsets_ready's. symptoms: fractioning_checks.symptoms' rows from the
    failing containers' logs, named instead of the generic advice."""
    rows = daemonsets_ready(fractioning_checks.current_daemonsets(daemonsets, config), pods)
    bad = [r for r in rows if not r["ok"]]
    if rows and not bad:
        return result(True, rows, "%d DaemonSets ready: %s" % (len(rows), ", ".join(
            "%s %s/%s" % (r["name"], r["ready"], r["desired"]) for r in rows)))
    parts = [_daemonset_line(row) for row in bad] or [
        "No DaemonSet of the current GpuFractioningConfig default in namespace %s." % namespace]
    parts += ["%s." % s.get("message") for s in symptoms or []]
    if not symptoms:
        parts.append("A mismatch usually means a node failed the NRI or CRI socket check: compare %s and %s with "
                     "those nodes (run the preflight play) and read the pod's logs (kubectl -n %s logs POD)."
                     % (cri_socket_path, nri_socket_path, namespace))
    return result(False, rows, " ".join(parts))


def fractioning_config_ready(configs, release, namespace, timeout, settings=None):
    """GpuFractioningConfig default exists and reports Ready=True. rows: its
    conditions. settings: the knobs fractioning_checks.symptoms names (a Ready
    condition it recognises is named with its fix)."""
    config = (configs or [None])[0]
    if config is None:
        return result(False, [], (
            "GpuFractioningConfig default does not exist: the chart's post-install hook creates it. Run the role "
            "again or check `helm get hooks %s -n %s`." % (release, namespace)))
    rows = _condition_rows(config)
    if (conditions(config).get("Ready") or {}).get("status") == "True":
        return result(True, rows, "GpuFractioningConfig default is Ready")
    symptoms = fractioning_checks.symptoms([], config, settings or {}, [])
    advice = (". ".join(s["message"] for s in symptoms) + "." if symptoms else
              "The condition that is False names the failing daemon: read its pods' logs.")
    return result(False, rows, "GpuFractioningConfig default is not Ready after %s s: %s. %s" % (
        timeout, condition_summary(config), advice))


def fractioning_nodes_ready(nodes, config, timeout, condition=NODE_CONDITION):
    """Every node the config selects (at least one) reports `condition` True.
    rows: nodes_condition's."""
    rows = nodes_condition(nodes, condition)
    if not rows:
        selector = ((config or {}).get("spec") or {}).get("nodeSelector") or {}
        return result(False, rows, "No node matches the config's nodeSelector %s: label the GPU nodes."
                      % json.dumps(selector))
    bad = [r for r in rows if not r["ok"]]
    if bad:
        return result(False, rows, (
            "Not ready for fractions after %s s: %s. Fractional pods are not scheduled there: read the mpsd and "
            "fractiond pods' logs on those nodes." % (timeout, "; ".join(
                " ".join(p for p in (r["node"], r["status"], r["message"]) if p) for r in bad))))
    return result(True, rows, "%d node(s) report %s=True: %s" % (len(rows), condition, ", ".join(
        r["node"] for r in rows)))


# ---------------------------------------------------------------- gpu_operator
def _per_target(targets, found):
    """({node, ok} per target node, the targets not in found, in their order)."""
    missing = _missing(targets, found or [])
    return [{"node": t, "ok": t not in missing} for t in targets or []], missing


def driver_pods_ready(targets, ready_nodes, version, namespace, timeout, repository=""):
    """A ready driver pod of `version` runs on every target node (ready_nodes:
    where one does, from the driver_pod_nodes filter). rows: {node, ok} per target."""
    rows, missing = _per_target(targets, ready_nodes)
    if not missing:
        return result(True, rows, "A ready driver pod of %s on %s" % (version, ", ".join(targets or [])))
    return result(False, rows, (
        "After %s s no ready driver pod of %s runs on %s. See `kubectl -n %s get pods -l app=nvidia-driver-daemonset "
        "-o wide` and the pods' events: the driver image (%s/driver:%s-<os>) must exist for the nodes' OS, and the "
        "driver must build for their kernel." % (timeout, version, ", ".join(missing), namespace,
                                                 repository or "nvcr.io/nvidia", version)))


def driver_reported(targets, nodes, version):
    """Every target node reports the driver `version` (nodes: those labelled
    nvidia.com/cuda.driver-version.full=<version>). rows: {node, ok} per target."""
    rows, silent = _per_target(targets, [_name(n) for n in nodes or []])
    if not silent:
        return result(True, rows, "Driver %s on %s" % (version, ", ".join(targets or [])))
    return result(False, rows, (
        "%s run the driver pod but do not report driver %s (label nvidia.com/cuda.driver-version.full): GPU Feature "
        "Discovery has not seen it loaded. Check the node's gpu-feature-discovery pod and `nvidia-smi` in the driver "
        "container." % (", ".join(silent), version)))


# ---------------------------------------------------------------- uninstall
def mpsd_pods_gone(pods, namespace, timeout):
    """No mpsd pod is left after the GpuFractioningConfig was deleted. rows:
    {pod, node} per pod left."""
    rows = [{"pod": _name(p), "node": ((p or {}).get("spec") or {}).get("nodeName") or ""} for p in pods or []]
    if not rows:
        return result(True, rows, "No mpsd pod is left")
    return result(False, rows, (
        "%d mpsd pod(s) still run %s s after the config was deleted: %s. MPS stays on those GPUs while they run. "
        "Run uninstall again to keep waiting (they take about a minute), or look at `kubectl -n %s describe pod POD`. "
        "The releases were not uninstalled." % (len(rows), timeout, ", ".join(
            "%s on %s" % (r["pod"], r["node"]) for r in rows), namespace)))


def read_failure(value):
    """The error of a k8s_info read that failed (its result, kept by failed_when: false), else ''."""
    if isinstance(value, dict) and "resources" not in value and "metadata" not in value and value.get("msg"):
        return one_line(value["msg"])
    return ""


def after_failed_read(result, failure):
    """A predicate's result, named for what it is when its last read failed: not a missing
    object but a cluster that did not answer (a lost API server, most often)."""
    if not failure:
        return result
    return dict(result, ok=False, message=(
        "The last read of the cluster failed: %s. The API server may have stopped answering: check it "
        "(kubectl get --raw /readyz), then run again: the run goes on from what is installed." % failure))

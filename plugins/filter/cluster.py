# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters the cluster roles use to turn what the API server returns into the
guide's checks (documentation: the .yml files beside this one). Pure
functions of their inputs: the unit tests call them alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import re

from ansible.errors import AnsibleFilterError

try:  # Python 3.11+ on the controller (filters run there)
    import tomllib
except ImportError:  # pragma: no cover - older controllers
    tomllib = None

DIGEST_RE = re.compile(r"@(sha256:[0-9a-f]{64})$")
IMAGE_ID_RE = re.compile(r"^(?:[a-z-]+://)?(?P<repo>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})$")
VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+){1,3})")
NRI_PLUGIN = "io.containerd.nri.v1.nri"
NRI_DEFAULT_SOCKET = "/var/run/nri/nri.sock"


# ---------------------------------------------------------------- registry
def dockerconfigjson(registry, username, password):
    """The text of a kubernetes.io/dockerconfigjson Secret for one registry host."""
    for label, value in (("registry", registry), ("username", username), ("password", password)):
        if not isinstance(value, str) or not value:
            raise AnsibleFilterError("dockerconfigjson: %s must be a non-empty string" % label)
    host = registry.split("/", 1)[0]
    auth = base64.b64encode(("%s:%s" % (username, password)).encode("utf-8")).decode("ascii")
    return json.dumps({"auths": {host: {"username": username, "password": password, "auth": auth}}},
                      sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------- images
def _statuses(pod):
    status = pod.get("status") or {}
    found = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or []:
            found[entry.get("name")] = entry
    return found


def _manifest_index(manifest, fork):
    index = {}
    for image in (manifest or {}).get("images") or []:
        if image.get("fork") == fork:
            index[image.get("service")] = image
    return index


def pod_images(pods, base, tag, manifest=None, fork=None):
    """One row per container of every pod: is its image `<base>/<service>:<tag>`
    of a service the image manifest lists, and is the digest the node pulled the
    one the manifest recorded?

    pods: Pod objects (k8s_info resources). base: `<registry>/<fork>`.
    manifest: the fork_images manifest (None: the digests are not compared).
    fork: the manifest's fork id (kai_scheduler, gpu_fractioning: fork_images' ids).
    Row keys: pod, node, container, image, service, digest, expected_digest, ok, problem.
    """
    if not isinstance(pods, list):
        raise AnsibleFilterError("pod_images: pods must be a list of Pod objects")
    recorded = _manifest_index(manifest, fork) if manifest is not None else None
    prefix = base.rstrip("/") + "/"
    rows = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        statuses = _statuses(pod)
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            name = container.get("name")
            image = container.get("image") or ""
            status = statuses.get(name) or {}
            match = DIGEST_RE.search(status.get("imageID") or "")
            row = {"pod": meta.get("name"), "node": spec.get("nodeName") or "", "container": name,
                   "image": image, "service": None, "digest": match.group(1) if match else None,
                   "expected_digest": None, "ok": False, "problem": ""}
            rows.append(row)
            repo, image_tag = image.rpartition(":")[::2]
            if "/" in image_tag or not repo:
                repo, image_tag = image, ""
            if not repo.startswith(prefix) or "/" in repo[len(prefix):] or image_tag != tag:
                row["problem"] = ("runs %s, not an image of this build (%s<service>:%s)"
                                  % (image, prefix, tag))
                continue
            service = repo[len(prefix):]
            row["service"] = service
            if recorded is None:
                row["ok"] = True
                continue
            entry = recorded.get(service)
            if entry is None:
                row["problem"] = ("runs %s, which the image manifest does not list: it was not built "
                                  "and verified by the images play" % image)
                continue
            row["expected_digest"] = entry.get("digest")
            if not status.get("imageID"):
                row["problem"] = "has not pulled its image yet (no imageID in the pod status)"
            elif row["digest"] is None:
                row["problem"] = ("reports image ID %s without a registry digest: the image was "
                                  "not pulled from the registry" % status.get("imageID"))
            elif IMAGE_ID_RE.match(status["imageID"]).group("repo") != repo:
                row["problem"] = ("is reported as %s: the node holds the same image under another name, so "
                                  "the pod status does not show the digest of %s. Remove the other name from "
                                  "the node (crictl rmi) and restart the pod, or compare the digests by hand"
                                  % (status["imageID"], image))
            elif row["digest"] != row["expected_digest"]:
                row["problem"] = ("pulled %s@%s, but the images play recorded %s: the tag was pushed "
                                  "again after the images play verified it"
                                  % (repo, row["digest"], row["expected_digest"]))
            else:
                row["ok"] = True
    return rows


# ---------------------------------------------------------------- workloads
def _owned_by(pod, uid):
    return any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def owned_pods(pods, uid):
    """The pods whose ownerReferences name the object with this uid."""
    return [pod for pod in pods or [] if uid and _owned_by(pod, uid)]


def _pod_ready(pod):
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _pod_reason(pod):
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        state = entry.get("state") or {}
        for kind in ("waiting", "terminated"):
            if state.get(kind) and state[kind].get("reason"):
                return "%s %s" % (entry.get("name"), state[kind]["reason"])
    return status.get("reason") or status.get("phase") or "not ready"


def deployments_ready(deployments):
    """One row per Deployment, ready as `kubectl rollout status` means it: the
    Available condition True, the latest generation observed, every replica
    updated and available. Row keys: name, ready, replicas, available, ok, reason."""
    rows = []
    for deploy in deployments or []:
        meta = deploy.get("metadata") or {}
        status = deploy.get("status") or {}
        wanted = int((deploy.get("spec") or {}).get("replicas", 1) or 0)
        available = int(status.get("availableReplicas") or 0)
        updated = int(status.get("updatedReplicas") or 0)
        condition = conditions(deploy).get("Available") or {}
        reason = ""
        if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
            reason = "the controller has not observed the latest spec yet"
        elif condition.get("status") != "True":
            reason = "Available=%s%s" % (condition.get("status") or "missing",
                                         (" (%s: %s)" % (condition.get("reason"), condition.get("message"))
                                          if condition.get("reason") else ""))
        elif updated < wanted or available < wanted or int(status.get("replicas") or 0) > wanted:
            reason = "rollout in progress: %d of %d replicas updated, %d available" % (updated, wanted, available)
        rows.append({"name": meta.get("name"), "replicas": wanted, "available": available,
                     "ok": reason == "", "reason": reason})
    return rows


def daemonsets_ready(daemonsets, pods):
    """One row per DaemonSet: desired, ready, and the pods (with their nodes)
    that are not ready. Row keys: name, component (its pods'
    app.kubernetes.io/component label, else its name), uid, desired, ready, ok,
    not_ready (list of {pod, node, reason}), missing (desired minus the pods
    that exist)."""
    rows = []
    for ds in daemonsets or []:
        meta = ds.get("metadata") or {}
        status = ds.get("status") or {}
        desired = int(status.get("desiredNumberScheduled") or 0)
        ready = int(status.get("numberReady") or 0)
        mine = [p for p in pods or [] if _owned_by(p, meta.get("uid"))]
        not_ready = [{"pod": (p.get("metadata") or {}).get("name"),
                      "node": (p.get("spec") or {}).get("nodeName") or "(unscheduled)",
                      "reason": _pod_reason(p)}
                     for p in mine if not _pod_ready(p)]
        labels = (((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        rows.append({"name": meta.get("name"), "desired": desired, "ready": ready,
                     "component": labels.get("app.kubernetes.io/component") or meta.get("name"),
                     "uid": meta.get("uid"),
                     "ok": desired > 0 and desired == ready and not not_ready,
                     "not_ready": not_ready, "missing": max(desired - len(mine), 0)})
    return rows


def conditions(obj):
    """{type: {status, reason, message}} from an object's status.conditions."""
    found = {}
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        found[condition.get("type")] = {"status": condition.get("status"),
                                        "reason": condition.get("reason") or "",
                                        "message": condition.get("message") or ""}
    return found


def nodes_condition(nodes, kind):
    """One row per Node: its condition `kind`. Row keys: node, status, reason, message, ok."""
    rows = []
    for node in nodes or []:
        value = conditions(node).get(kind) or {}
        rows.append({"node": (node.get("metadata") or {}).get("name"), "status": value.get("status") or "missing",
                     "reason": value.get("reason") or "", "message": value.get("message") or "",
                     "ok": value.get("status") == "True"})
    return rows


def api_version_of(apis, kind):
    """The group/version serving `kind`, from kubernetes.core.k8s_cluster_info's
    `apis` ({group/version: {Kind: {...}}}); the preferred version first, None if
    no API serves it."""
    found = []
    for group_version, resources in (apis or {}).items():
        entry = (resources or {}).get(kind)
        if isinstance(entry, dict):
            found.append((not entry.get("preferred", False), group_version))
    return sorted(found)[0][1] if found else None


def condition_summary(obj):
    """'Type=Status (Reason: message), ...' of an object's conditions, for messages."""
    parts = []
    for kind, value in conditions(obj).items():
        detail = ": ".join(p for p in (value["reason"], value["message"]) if p)
        parts.append("%s=%s%s" % (kind, value["status"], " (%s)" % detail if detail else ""))
    return ", ".join(parts) or "no conditions"


# ---------------------------------------------------------------- custom resources
def crds_matching(crds, pattern):
    """CRDs whose name matches the regular expression (re.search), as
    {name, group, kind, version (the storage version), namespaced}."""
    found = []
    for crd in crds or []:
        name = (crd.get("metadata") or {}).get("name") or ""
        if not re.search(pattern, name):
            continue
        spec = crd.get("spec") or {}
        versions = spec.get("versions") or []
        storage = [v.get("name") for v in versions if v.get("storage")] or [v.get("name") for v in versions]
        found.append({"name": name, "group": spec.get("group"), "kind": (spec.get("names") or {}).get("kind"),
                      "version": storage[0] if storage else None, "namespaced": spec.get("scope") == "Namespaced"})
    return found


def custom_objects(results):
    """The objects listed by a k8s_info loop over crds_matching() items, as
    {api_version, kind, name, namespace}."""
    objects = []
    for result in results or []:
        crd = result.get("item") or {}
        for obj in result.get("resources") or []:
            meta = obj.get("metadata") or {}
            objects.append({"api_version": "%s/%s" % (crd.get("group"), crd.get("version")),
                            "kind": crd.get("kind"), "name": meta.get("name"),
                            "namespace": meta.get("namespace") or ""})
    return objects


def object_refs(objects):
    """custom_objects() rows as minimal manifests (apiVersion, kind, metadata), for
    kubernetes.core.k8s to delete them in one task."""
    refs = []
    for obj in objects or []:
        meta = {"name": obj["name"]}
        if obj.get("namespace"):
            meta["namespace"] = obj["namespace"]
        refs.append({"apiVersion": obj["api_version"], "kind": obj["kind"], "metadata": meta})
    return refs


def foreign_objects(objects, chart_objects):
    """'Kind namespace/name' of the objects not in chart_objects ({kind: [names]})."""
    return ["%s %s%s" % (o["kind"], (o["namespace"] + "/") if o["namespace"] else "", o["name"])
            for o in objects or [] if o["name"] not in (chart_objects or {}).get(o["kind"], [])]


# ---------------------------------------------------------------- versions
def image_version(image):
    """The version in an image tag: nvcr.io/nvidia/k8s-device-plugin:v0.20.1 -> 0.20.1,
    .../container-toolkit:v1.20.1-ubuntu24.04 -> 1.20.1; None without a version tag."""
    if not isinstance(image, str) or ":" not in image.rsplit("/", 1)[-1]:
        return None
    tag = image.rsplit(":", 1)[1]
    match = VERSION_RE.match(tag.split("@", 1)[0])
    return match.group(1) if match else None


def component_images(workloads, names):
    """The workloads (Deployments, DaemonSets) whose containers run an image whose
    last path part is one of `names`. Returns {name: [{kind, namespace, workload,
    image, version, ready}]}."""
    found = dict((name, []) for name in names)
    for obj in workloads or []:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        if obj.get("kind") == "DaemonSet":
            ready = (int(status.get("desiredNumberScheduled") or 0) > 0
                     and status.get("numberReady") == status.get("desiredNumberScheduled"))
        else:
            ready = int(status.get("availableReplicas") or 0) > 0
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in (template.get("initContainers") or []) + (template.get("containers") or []):
            image = container.get("image") or ""
            repo = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
            name = repo.rsplit("/", 1)[-1]
            if name in found:
                found[name].append({"kind": obj.get("kind"), "namespace": meta.get("namespace"),
                                    "workload": meta.get("name"), "image": image,
                                    "version": image_version(image), "ready": ready})
    return found


# ---------------------------------------------------------------- containerd
def containerd_nri(config_text, runtime_version=None):
    """Is NRI enabled in a containerd config.toml?

    The config decides: `disable = true` in the NRI plugin's section or the
    plugin in `disabled_plugins` turns it off, `disable = false` on. Without a
    section containerd's default applies: on from 2.0, off in 1.7.
    runtime_version: containerd's version (2.0.4, v1.7.22, containerd://2.0.4);
    unknown is read as 2.x. Whether the version is new enough for fractions is
    a separate check. Returns {enabled, reason, socket_path, section}.
    """
    if tomllib is None:  # pragma: no cover
        raise AnsibleFilterError("containerd_nri needs Python 3.11 (tomllib) on the controller")
    try:
        config = tomllib.loads(config_text or "")
    except tomllib.TOMLDecodeError as exc:
        return {"enabled": False, "reason": "the containerd config is not valid TOML: %s" % exc,
                "socket_path": None, "section": False}
    version = None
    if runtime_version:
        match = re.search(r"(\d+)\.(\d+)", str(runtime_version))
        version = (int(match.group(1)), int(match.group(2))) if match else None
    section = (config.get("plugins") or {}).get(NRI_PLUGIN)
    socket_path = (section or {}).get("socket_path") or NRI_DEFAULT_SOCKET
    result = {"enabled": False, "reason": "", "socket_path": socket_path, "section": section is not None}
    if NRI_PLUGIN in (config.get("disabled_plugins") or []):
        result["reason"] = "%s is listed in disabled_plugins" % NRI_PLUGIN
    elif section is not None and section.get("disable") is True:
        result["reason"] = "NRI plugin section sets disable = true"
    elif section is not None and section.get("disable") is False:
        result.update(enabled=True, reason="NRI plugin section sets disable = false")
    elif version is not None and version < (2, 0):
        result["reason"] = ("containerd %d.%d leaves NRI off unless its plugin section sets disable = false"
                            % version)
    else:
        result.update(enabled=True, reason="enabled by default (containerd %s)"
                      % ("%d.%d" % version if version else "2.x"))
    return result


def stat_kind(stat):
    """What ansible.builtin.stat found, in words: socket, missing, link to X, ..."""
    stat = stat or {}
    if not stat.get("exists"):
        return "missing"
    if stat.get("islnk"):
        return "link to %s" % stat.get("lnk_source")
    for key, word in (("issock", "socket"), ("isreg", "regular file"), ("isdir", "folder"),
                      ("isfifo", "fifo"), ("ischr", "character device"), ("isblk", "block device")):
        if stat.get(key):
            return word
    return "other file"


# ---------------------------------------------------------------- values
def value_paths(values, prefix=""):
    """Every key path of nested chart values, dotted (global, global.tag, ...)."""
    paths = []
    if isinstance(values, dict):
        for key, value in values.items():
            path = "%s.%s" % (prefix, key) if prefix else str(key)
            paths.append(path)
            paths.extend(value_paths(value, path))
    return paths


# ---------------------------------------------------------------- logs
def since_last(text, pattern):
    """The lines of text from the last one matching pattern (re.search) on; all
    lines when none matches. A log file a daemon appends to across restarts is
    judged on its current run only."""
    lines = (text or "").splitlines()
    starts = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    return lines[starts[-1]:] if starts else lines


def missing_patterns(lines, patterns):
    """The patterns (re.search) no line matches."""
    return [p for p in patterns or [] if not any(re.search(p, line) for line in lines or [])]


# ---------------------------------------------------------------- reports
def text_table(rows, columns):
    """rows (dicts) as aligned text lines under a header; columns: keys in order."""
    cells = [[str(c).upper() for c in columns]]
    for row in rows or []:
        cells.append(["" if row.get(c) is None else str(row.get(c)) for c in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]


class FilterModule(object):
    def filters(self):
        return {
            "dockerconfigjson": dockerconfigjson,
            "pod_images": pod_images,
            "daemonsets_ready": daemonsets_ready,
            "owned_pods": owned_pods,
            "deployments_ready": deployments_ready,
            "conditions": conditions,
            "crds_matching": crds_matching,
            "custom_objects": custom_objects,
            "foreign_objects": foreign_objects,
            "object_refs": object_refs,
            "nodes_condition": nodes_condition,
            "api_version_of": api_version_of,
            "condition_summary": condition_summary,
            "image_version": image_version,
            "component_images": component_images,
            "containerd_nri": containerd_nri,
            "stat_kind": stat_kind,
            "text_table": text_table,
            "since_last": since_last,
            "missing_patterns": missing_patterns,
            "value_paths": value_paths,
        }

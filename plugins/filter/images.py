# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters over the images a cluster runs and pulls: the pull secret's text, each pod's
image against the image manifest, the versions in image tags. Documentation: the .yml
files beside this one. Pure functions of their inputs: the unit tests call them alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import re

from ansible.errors import AnsibleFilterError

DIGEST_RE = re.compile(r"@(sha256:[0-9a-f]{64})$")
IMAGE_ID_RE = re.compile(r"^(?:[a-z-]+://)?(?P<repo>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})$")
VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+){1,3})")


def dockerconfigjson(registry, username, password):
    """The text of a kubernetes.io/dockerconfigjson Secret for one registry host."""
    for label, value in (("registry", registry), ("username", username), ("password", password)):
        if not isinstance(value, str) or not value:
            raise AnsibleFilterError("dockerconfigjson: %s must be a non-empty string" % label)
    host = registry.split("/", 1)[0]
    auth = base64.b64encode(("%s:%s" % (username, password)).encode("utf-8")).decode("ascii")
    return json.dumps({"auths": {host: {"username": username, "password": password, "auth": auth}}},
                      sort_keys=True, separators=(",", ":"))


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


def forks_present(lookups):
    """The ids of the forks whose images were all found: `lookups` is the looped lookup's
    result (registry_image_info's, with all_present; or docker_image_info's, whose
    images list holds the ones found) per fork, each carrying its `_fork_images_fork`."""
    present = []
    for result in (lookups or {}).get("results") or []:
        fork = result.get("_fork_images_fork") or {}
        if "all_present" in result:
            found = bool(result["all_present"])
        else:
            found = result.get("images") is not None and len(result.get("images") or []) == len(fork.get("images") or [])
        if found and fork.get("id"):
            present.append(fork["id"])
    return present


class FilterModule(object):
    def filters(self):
        return {
            "forks_present": forks_present,
            "dockerconfigjson": dockerconfigjson,
            "pod_images": pod_images,
            "image_version": image_version,
            "component_images": component_images,
        }

# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters over the images a cluster runs and pulls: the pull secret's text, each pod's
image against the image manifest, the forks whose images are all there. Documentation:
the .yml files beside this one. Pure functions of their inputs: the unit tests call them
alone. image_version and component_images are no filters: preflight_cluster_rows reads
the GPU stack's versions with them."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import pod_images as _pod_images

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


def pod_images(pods, base, tag, manifest=None, fork=None):
    """module_utils/pod_images.py's rows, for a list of Pod objects."""
    if not isinstance(pods, list):
        raise AnsibleFilterError("pod_images: pods must be a list of Pod objects")
    return _pod_images.pod_images(pods, base, tag, manifest, fork)


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
        }

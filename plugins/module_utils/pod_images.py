# -*- coding: utf-8 -*-
# Apache-2.0
"""Each pod's images against the build's: `<base>/<service>:<tag>` of a service the
image manifest (fork_images) lists, pulled at the digest it recorded. A pure
function (the filter smshare.kai.pod_images and the fractioning verify use it)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

DIGEST_RE = re.compile(r"@(sha256:[0-9a-f]{64})$")
IMAGE_ID_RE = re.compile(r"^(?:[a-z-]+://)?(?P<repo>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})$")


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

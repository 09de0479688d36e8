# -*- coding: utf-8 -*-
# Apache-2.0
"""Does the fork_images manifest record the build a chart role installs?
(documentation: image_manifest_check.yml beside this file)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError


def image_manifest_check(manifest, path, registry, tag, commit, fork, label, services=None):
    """{ok, message}: the manifest (parsed, or None when there is none) records this
    registry, tag and commit of `fork`, with an image of each of `services` (empty: at
    least one image of the fork)."""
    if manifest is not None and not isinstance(manifest, dict):
        raise AnsibleFilterError("image_manifest_check: %s does not hold a JSON object" % path)
    services = [str(s) for s in services or []]
    if manifest is None:
        return {"ok": False, "message": "The image manifest %s does not exist on the controller" % path}
    found_registry = str(manifest.get("registry", "?"))
    found_tag = str(manifest.get("tag", "?"))
    found_commit = str((manifest.get("commits") or {}).get(fork, "?"))
    images = [i for i in manifest.get("images") or [] if isinstance(i, dict) and i.get("fork") == fork]
    have = sorted(set(str(i.get("service", "")) for i in images))
    images_ok = all(s in have for s in services) if services else len(images) > 0
    ok = found_registry == registry and found_tag == tag and found_commit == commit and images_ok
    wanted = ", ".join(services) if services else "its images"
    return {"ok": ok, "message": (
        "The image manifest %s records registry %s, tag %s and %s commit %s (images: %s), not %s, %s and %s with %s"
        % (path, found_registry, found_tag, label, found_commit, ", ".join(have) or "none", registry, tag, commit, wanted))}


class FilterModule(object):
    def filters(self):
        return {"image_manifest_check": image_manifest_check}

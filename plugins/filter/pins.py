# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters for the guide's pins (documentation: pair_tag.yml beside this file)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def pair_tag(kai_scheduler_commit, gpu_fractioning_commit):
    """The image tag that names both fork commits: smshare-<7 of KAI>-<7 of fractioning>."""
    for label, sha in (("KAI-Scheduler", kai_scheduler_commit), ("gpu-fractioning", gpu_fractioning_commit)):
        if not isinstance(sha, str) or not FULL_SHA.match(sha):
            raise AnsibleFilterError(
                "pair_tag: the %s commit must be a full 40-hex SHA, got %r" % (label, sha))
    return "smshare-%s-%s" % (kai_scheduler_commit[:7], gpu_fractioning_commit[:7])


class FilterModule(object):
    def filters(self):
        return {"pair_tag": pair_tag}

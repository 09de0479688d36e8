# -*- coding: utf-8 -*-
# Apache-2.0
"""Filter for the nvidia_driver role's choice of versions (documentation:
nvidia_driver_versions.yml beside this file). The rule is
module_utils/apt.py's driver_versions, unit-tested alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.module_utils import apt as _apt
from ansible_collections.smshare.kai.plugins.module_utils.plain import plain as _plain

FABRICMANAGER = ("auto", "always", "never")


def nvidia_driver_versions(offer, branch, version=None, fabricmanager="auto", nscq=True):
    offer = _plain(offer)
    if not isinstance(offer, dict):
        raise AnsibleFilterError("nvidia_driver_versions: expected smshare.kai.nvidia_driver_info's result, got %s"
                                 % type(offer).__name__)
    if fabricmanager not in FABRICMANAGER:
        raise AnsibleFilterError("nvidia_driver_versions: fabricmanager must be one of %s, got %r"
                                 % (", ".join(FABRICMANAGER), fabricmanager))
    try:
        return _apt.driver_versions(offer, _plain(branch), None if version is None else str(version),
                                    str(fabricmanager), bool(nscq))
    except ValueError:
        raise AnsibleFilterError("nvidia_driver_versions: branch must be a driver branch number, got %r" % (branch,))


class FilterModule(object):
    def filters(self):
        return {"nvidia_driver_versions": nvidia_driver_versions}

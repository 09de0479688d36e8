# -*- coding: utf-8 -*-
# Apache-2.0
"""Filter reading a node's containerd config: is NRI on (the fork's device plugin needs
it). Documentation: the .yml files beside this one. Pure functions of their inputs: the
unit tests call them alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

try:  # Python 3.11+ on the controller (filters run there)
    import tomllib
except ImportError:  # pragma: no cover - older controllers
    tomllib = None

NRI_PLUGIN = "io.containerd.nri.v1.nri"
NRI_DEFAULT_SOCKET = "/var/run/nri/nri.sock"


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


class FilterModule(object):
    def filters(self):
        return {
            "containerd_nri": containerd_nri,
        }

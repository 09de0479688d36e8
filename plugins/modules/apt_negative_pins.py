#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_negative_pins
short_description: Remove apt preferences records that give NVIDIA's repository a negative priority
version_added: 0.1.0
description:
  - "A record in C(/etc/apt/preferences) or C(/etc/apt/preferences.d/) whose
    C(Pin) names NVIDIA's repository (C(Pin: origin developer.download.nvidia.com),
    C(Pin: release o=NVIDIA)) with a negative C(Pin-Priority) stops apt from ever
    installing the driver from it; C(apt-get install) then appears to do nothing
    (the guide's 'check apt-cache policy nvidia-driver-open')."
  - This module finds such records that affect any of O(packages) and removes
    each whole record (from its first to its last line), keeping every other
    record and comment of the file. A file left without records is deleted.
  - Run it in check mode to find the records without removing them
    (RV(pins) names file and line).
extends_documentation_fragment:
  - smshare.kai.attributes
options:
  origins:
    description:
      - "Host names that count as NVIDIA's repository in C(Pin: origin) records: add your mirror's."
    type: list
    elements: str
    default: [developer.download.nvidia.com]
  release_origins:
    description:
      - "Values of the repository's C(Origin) or C(Label) that count as NVIDIA's in C(Pin: release o=...) or C(l=...) records."
    type: list
    elements: str
    default: [NVIDIA, NVIDIA CUDA]
  packages:
    description:
      - Packages a record must affect (by name, glob or C(/regex/) in its C(Package) field) to count.
    type: list
    elements: str
    default: [nvidia-driver-open, nvidia-fabricmanager, libnvidia-nscq]
  preferences_dir:
    description:
      - The apt preferences folder (apt's C(Dir::Etc::PreferencesParts)); the
        single preferences file beside it (C(preferences)) is read too.
      - Change it only for an image root or an apt configured elsewhere.
    type: path
    default: /etc/apt/preferences.d
attributes:
  check_mode:
    support: full
    details: Reports the records it would remove (and the diff) and removes nothing.
  diff_mode:
    support: full
    details: Each changed preferences file before and after (V((deleted)) when nothing is left).
  idempotent:
    support: full
    details: A second run finds nothing to remove.
seealso:
  - module: smshare.kai.nvidia_driver_info
author:
  - smshare.kai maintainers (@smshare)
"""

EXAMPLES = r"""
- name: Find the records that block NVIDIA's repository, changing nothing
  smshare.kai.apt_negative_pins:
  check_mode: true
  register: blocking

- name: Remove them, counting a mirror as NVIDIA's too
  smshare.kai.apt_negative_pins:
    origins: [developer.download.nvidia.com, mirror.example.com]
"""

RETURN = r"""
pins:
  description: The records found (and, unless in check mode, removed).
  returned: success
  type: list
  elements: dict
  contains:
    file:
      description: The preferences file.
      type: str
    line:
      description: Line number of the record's C(Pin) line.
      type: int
    pin:
      description: The C(Pin) line.
      type: str
    package:
      description: The record's C(Package) field.
      type: str
    priority:
      description: Its C(Pin-Priority).
      type: int
  sample: [{"file": "/etc/apt/preferences.d/freeze-nvidia.pref", "line": 7,
            "pin": "Pin: release o=NVIDIA", "package": "*", "priority": -10}]
deleted_files:
  description: Files deleted because no record was left in them.
  returned: success
  type: list
  elements: str
failure:
  description: Name of the failure, V(bad_input) (a parameter breaks a rule) or V(write_failed).
  returned: failure
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.apt import (
    ORIGIN_HOST_NAME,
    NVIDIA_RELEASE_ORIGINS,
    find_negative_pins,
    without_records,
)

PACKAGE_PATTERN = r"[a-z0-9*?+.\[\]-]+|/[^/]+/"


def check(params):
    def origin(name, value):
        validate.text(name, value, example="developer.download.nvidia.com", pattern=ORIGIN_HOST_NAME,
                      rule="must be a host name, as apt shows it in `Pin: origin`")

    def release_origin(name, value):
        validate.text(name, value, example="NVIDIA")

    def package(name, value):
        validate.text(name, value, example="nvidia-driver-open", pattern=PACKAGE_PATTERN,
                      rule="must be a package name, a glob such as nvidia-* or a /regex/")

    validate.items("origins", params["origins"], example="[developer.download.nvidia.com]", each=origin)
    validate.items("release_origins", params["release_origins"], example="[NVIDIA]", minimum=0,
                   each=release_origin)
    validate.items("packages", params["packages"], example="[nvidia-driver-open]", each=package)
    params["preferences_dir"] = validate.path("preferences_dir", params["preferences_dir"],
                                              example="/etc/apt/preferences.d")


def plan(params):
    """[(path, text before, text after or None to delete, [pins])] for every
    file that has records to remove."""
    changes = []
    for path, before, found in find_negative_pins(params["preferences_dir"], params["origins"],
                                                  params["release_origins"], params["packages"]):
        after, left = without_records(before, [tuple(pin["lines"]) for pin in found])
        changes.append((path, before, after if left else None, found))
    return changes


def write(module, path, text):
    """Replace path's content atomically, keeping its mode and owner."""
    stat = os.stat(path)
    handle, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".smshare-")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(temp, stat.st_mode & 0o7777)
    os.chown(temp, stat.st_uid, stat.st_gid)
    module.atomic_move(temp, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            origins=dict(type="list", elements="str", default=["developer.download.nvidia.com"]),
            release_origins=dict(type="list", elements="str", default=list(NVIDIA_RELEASE_ORIGINS)),
            packages=dict(type="list", elements="str",
                          default=["nvidia-driver-open", "nvidia-fabricmanager", "libnvidia-nscq"]),
            preferences_dir=dict(type="path", default="/etc/apt/preferences.d"),
        ),
        supports_check_mode=True,
    )
    validate.refuse_bad_input(module, check)

    changes = plan(module.params)
    pins = [dict((k, v) for k, v in pin.items() if k != "lines") for change in changes for pin in change[3]]
    deleted = [path for path, _before, after, _pins in changes if after is None]
    result = {"changed": bool(changes), "pins": pins, "deleted_files": deleted}
    if module._diff:
        result["diff"] = [{"before_header": path, "after_header": path if after is not None else "(deleted)",
                           "before": before, "after": after or ""}
                          for path, before, after, _pins in changes]
    if not module.check_mode:
        for path, _before, after, _pins in changes:
            try:
                if after is None:
                    os.remove(path)
                else:
                    write(module, path, after)
            except (IOError, OSError) as exc:
                module.fail_json(msg="could not rewrite %s: %s" % (path, to_native(exc)),
                                 failure="write_failed", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_holders_info
short_description: Find the processes that hold a node's NVIDIA devices open
version_added: 0.1.0
description:
  - Lists every process on the host with an NVIDIA device (C(/dev/nvidia*)) open, read from
    C(/proc/<pid>/fd), with its command and, when its cgroup is a Kubernetes pod's, the pod's UID.
  - Returns as RV(holders) those whose command (C(/proc/<pid>/comm)) is not in
    O(allowed_processes), each with why it holds the GPU and what to do; the pods in O(pods)
    name the pod a process runs in.
  - The P(smshare.kai.driver_upgrade#role) role runs it after the drain and before the driver
    changes, so that a package install or a reboot never happens under a process still using
    the GPU (a workload killed, or C(driver is in use)).
  - Reading another user's C(/proc/<pid>/fd) needs root (C(become)); the processes it cannot read
    are counted in RV(unreadable), never silently dropped.
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
options:
  allowed_processes:
    description:
      - Commands (as C(/proc/<pid>/comm) gives them, at most 15 characters) that hold the devices
        by design and are not reported as holders, the driver stack's own daemons.
      - The kernel cuts a command to its first 15 characters, so C(nvidia-persistenced) is V(nvidia-persiste).
    type: list
    elements: str
    default: [nvidia-persiste, nv-fabricmanage, nv-hostengine, nvidia-device-p, gpu-feature-dis, dcgm-exporter]
  pods:
    description:
      - The node's pods (as C(kubernetes.core.k8s_info) returns them), used only to name the pod a
        holding process runs in.
    type: list
    elements: dict
    default: []
seealso:
  - module: smshare.kai.gpu_info
author:
  - smshare.kai maintainers (@smshare)
"""

EXAMPLES = r"""
- name: Find what still holds the GPUs
  smshare.kai.gpu_holders_info:
  become: true
  register: holders

- name: Nothing but the driver stack holds them
  ansible.builtin.assert:
    that: holders.holders | length == 0
    fail_msg: "{{ holders.holders | map(attribute='name') | join(', ') }} hold the GPUs"
"""

RETURN = r"""
processes:
  description: Every process with an NVIDIA device open, allowed ones included.
  returned: success
  type: list
  elements: dict
  contains:
    pid:
      description: Its PID.
      type: int
    comm:
      description: Its command, as C(/proc/<pid>/comm) gives it.
      type: str
    cmdline:
      description: Its command line.
      type: str
    devices:
      description: The NVIDIA device paths it has open.
      type: list
      elements: str
    pod_uid:
      description: The UID of the pod its cgroup belongs to; empty when none.
      type: str
    allowed:
      description: Whether its command is in O(allowed_processes).
      type: bool
holders:
  description: >-
    The processes not allowed, as rows of kind (process), namespace (empty), name, why, action and text
    (the row as one line).
  returned: success
  type: list
  elements: dict
unreadable:
  description: How many processes' open files could not be read (not root, or gone meanwhile).
  returned: success
  type: int
failure:
  description: Name of the failure, bad_input (with RV(parameter)) or failed.
  returned: failure
  type: str
parameter:
  description: The parameter a RV(failure=bad_input) refusal is about.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import gpu_holders
from ansible_collections.smshare.kai.plugins.module_utils import validate

DEFAULT_ALLOWED = ["nvidia-persiste", "nv-fabricmanage", "nv-hostengine", "nvidia-device-p", "gpu-feature-dis",
                   "dcgm-exporter"]


def check_input(params):
    for name in params["allowed_processes"]:
        validate.text("allowed_processes", name, "nvidia-persiste", pattern=r"^[^/\s]{1,15}$",
                      rule="a command as /proc/<pid>/comm gives it: 1 to 15 characters, no / or space")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            allowed_processes=dict(type="list", elements="str", default=DEFAULT_ALLOWED),
            pods=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        check_input(module.params)
        processes, unreadable = gpu_holders.open_devices()
    except validate.BadInput as exc:
        module.fail_json(msg=exc.msg, **exc.details())
    except (IOError, OSError) as exc:
        module.fail_json(msg="reading /proc failed: %s" % exc, failure="failed")
    allowed = set(module.params["allowed_processes"])
    for process in processes:
        process["allowed"] = process["comm"] in allowed
    module.exit_json(changed=False, processes=processes, unreadable=unreadable,
                     holders=gpu_holders.holding_processes(processes, allowed, module.params["pods"]))


if __name__ == "__main__":
    main()

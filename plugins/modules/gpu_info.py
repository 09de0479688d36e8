#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Read NVIDIA driver and GPU facts from nvidia-smi
version_added: 0.1.0
description:
  - Runs C(nvidia-smi) queries in CSV form and returns the driver version and branch,
    the CUDA version, and per GPU its index, UUID, name, PCI bus id, memory total,
    compute mode, MIG mode, persistence mode, compute capability and, where the
    driver reports it, the multiprocessor (SM) count.
  - Reports whether NVSwitches are present (NVIDIA PCI bridges, vendor C(0x10de)
    class C(0x0680xx), in C(/sys/bus/pci/devices)), and therefore whether Fabric
    Manager is needed, and whether the Fabric Manager unit is active.
  - Fails with a named C(failure) when nvidia-smi is missing (V(nvidia_smi_missing)),
    the driver is not loaded (V(driver_not_loaded)), or the loaded kernel module
    differs from the installed library after an upgrade without a reboot
    (V(driver_library_mismatch)).
author:
  - smshare.kai maintainers (@smshare)
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
options:
  fabricmanager_service:
    description:
      - Name of the Fabric Manager systemd unit.
    type: str
    default: nvidia-fabricmanager
notes:
  - The C(multiprocessor_count) query field is not known to every driver; when the
    driver rejects it the value is null.
seealso:
  - module: smshare.kai.mps_info
"""

EXAMPLES = r"""
- name: Read the GPU facts
  smshare.kai.gpu_info:
  register: gpu

- name: Require the r615 driver branch
  ansible.builtin.assert:
    that: gpu.driver_branch == 615
    fail_msg: "Driver {{ gpu.driver_version }} is not r615: install nvidia-driver-pinning-615 first."
"""

RETURN = r"""
driver_version:
  description: Driver version nvidia-smi reports.
  returned: success
  type: str
  sample: "615.71.09"
driver_branch:
  description: Major number of the driver version.
  returned: success
  type: int
  sample: 615
cuda_version:
  description: Highest CUDA version the driver supports (from the nvidia-smi banner).
  returned: success
  type: str
  sample: "13.4"
gpu_count:
  description: Number of GPUs.
  returned: success
  type: int
  sample: 1
gpus:
  description: One entry per GPU.
  returned: success
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-5e0f2c4a-8b1d-4c7e-9a36-0d2f7b9e1a01
      name: NVIDIA A100-SXM4-80GB
      pci_bus_id: "00000000:07:00.0"
      memory_total_mib: 81920
      compute_mode: Default
      mig_mode: Disabled
      persistence_mode: Enabled
      compute_cap: "8.0"
      driver_version: "615.71.09"
      multiprocessor_count: 108
nvswitch_count:
  description: NVSwitches on the PCI bus; null when sysfs could not be read.
  returned: success
  type: int
  sample: 6
nvswitches_present:
  description: Whether the node has NVSwitches.
  returned: success
  type: bool
fabricmanager_needed:
  description: Whether Fabric Manager must run (true when NVSwitches are present).
  returned: success
  type: bool
fabricmanager_running:
  description: Whether the Fabric Manager unit is active; null without systemctl.
  returned: success
  type: bool
failure:
  description:
    - Name of the failure.
    - V(bad_input) (a parameter breaks a rule), V(nvidia_smi_missing), V(driver_not_loaded),
      V(driver_library_mismatch), V(unparsable) (output in an unexpected format),
      V(failed) (nvidia-smi failed for another reason).
  returned: failure
  type: str
cmd:
  description: The command that failed.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.nvidia_smi import (
    NvidiaSmi,
    branch_of,
    count_nvswitches,
)
from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError
from ansible_collections.smshare.kai.plugins.module_utils.systemd import unit_states

# A systemd unit name (systemd.unit(5)), optionally with its suffix.
UNIT_NAME = r"[A-Za-z0-9:_.\\@-]+"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            fabricmanager_service=dict(type="str", default="nvidia-fabricmanager"),
        ),
        supports_check_mode=True,
    )
    service = module.params["fabricmanager_service"]
    try:
        validate.text("fabricmanager_service", service, example="nvidia-fabricmanager", pattern=UNIT_NAME,
                      positional=True, rule="must be a systemd unit name")
        smi = NvidiaSmi(module)
        gpus = smi.gpus()
        cuda_version = smi.cuda_version()
    except ToolError as exc:
        module.fail_json(msg=exc.msg, **exc.details())

    versions = sorted(set(gpu["driver_version"] for gpu in gpus if gpu.get("driver_version")))
    driver_version = versions[0] if versions else None
    branch = branch_of(driver_version)
    if driver_version and branch is None:
        module.fail_json(msg="unexpected driver version %r from nvidia-smi" % driver_version, failure="unparsable")

    nvswitches = count_nvswitches()
    unit = service if "." in service else service + ".service"
    active = unit_states(module, [unit])[unit]["active"]
    module.exit_json(
        changed=False,
        driver_version=driver_version,
        driver_branch=branch,
        cuda_version=cuda_version,
        gpu_count=len(gpus),
        gpus=gpus,
        nvswitch_count=nvswitches,
        nvswitches_present=bool(nvswitches),
        fabricmanager_needed=bool(nvswitches),
        fabricmanager_running=None if active is None else active == "active",
    )


if __name__ == "__main__":
    main()

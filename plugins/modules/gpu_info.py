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
  - Reports whether NVSwitches are present (NVIDIA PCI bridges in sysfs, or
    O(nvswitch_count)), and therefore whether Fabric Manager is needed, and
    whether the C(nvidia-fabricmanager) service is running.
  - Fails with a named C(failure) when nvidia-smi is missing (V(nvidia_smi_missing)),
    the driver is not loaded (V(driver_not_loaded)), or the loaded kernel module
    differs from the installed library after an upgrade without a reboot
    (V(driver_library_mismatch)).
author:
  - smshare.kai maintainers (@smshare)
options:
  nvswitch_count:
    description:
      - Number of NVSwitches to assume instead of scanning O(pci_devices_path).
      - Use it where sysfs cannot show them (containers, lab nodes).
    type: int
  pci_devices_path:
    description:
      - Directory of PCI devices scanned for NVSwitches (vendor C(0x10de), class C(0x0680xx)).
    type: path
    default: /sys/bus/pci/devices
  fabricmanager_service:
    description:
      - Name of the Fabric Manager systemd unit.
    type: str
    default: nvidia-fabricmanager
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same queries in check mode.
  diff_mode:
    support: none
    description: Reports, changes nothing.
  idempotent:
    support: full
    description: Never changes anything.
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

- name: Lab node without sysfs NVSwitches
  smshare.kai.gpu_info:
    nvswitch_count: 6
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
  description: NVSwitches found (or given); null when sysfs could not be read.
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
  description: Name of the failure (nvidia_smi_missing, driver_not_loaded, driver_library_mismatch, unparsable, failed).
  returned: failure
  type: str
cmd:
  description: The command that failed.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils.nvidia_smi import (
    NvidiaSmi,
    NvidiaSmiError,
    count_nvswitches,
)


def fabricmanager_running(module, service):
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return None
    rc, out, _err = module.run_command([systemctl, "is-active", service],
                                       environ_update={"LC_ALL": "C"})
    return rc == 0 and out.strip() == "active"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvswitch_count=dict(type="int"),
            pci_devices_path=dict(type="path", default="/sys/bus/pci/devices"),
            fabricmanager_service=dict(type="str", default="nvidia-fabricmanager"),
        ),
        supports_check_mode=True,
    )
    if module.params["nvswitch_count"] is not None and module.params["nvswitch_count"] < 0:
        module.fail_json(msg="nvswitch_count must be 0 or more, got %d" % module.params["nvswitch_count"])
    smi = NvidiaSmi(module)
    try:
        gpus = smi.gpus()
        cuda_version = smi.cuda_version()
    except NvidiaSmiError as exc:
        module.fail_json(msg=exc.msg, **exc.details())

    versions = sorted(set(gpu["driver_version"] for gpu in gpus if gpu.get("driver_version")))
    driver_version = versions[0] if versions else None
    branch = None
    if driver_version:
        try:
            branch = int(driver_version.split(".")[0])
        except ValueError:
            module.fail_json(msg="unexpected driver version %r" % driver_version, failure="unparsable")

    nvswitches = module.params["nvswitch_count"]
    if nvswitches is None:
        nvswitches = count_nvswitches(module.params["pci_devices_path"])
    needed = bool(nvswitches)
    module.exit_json(
        changed=False,
        driver_version=driver_version,
        driver_branch=branch,
        cuda_version=cuda_version,
        gpu_count=len(gpus),
        gpus=gpus,
        nvswitch_count=nvswitches,
        nvswitches_present=needed,
        fabricmanager_needed=needed,
        fabricmanager_running=fabricmanager_running(module, module.params["fabricmanager_service"]),
    )


if __name__ == "__main__":
    main()

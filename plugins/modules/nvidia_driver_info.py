#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_info
short_description: Read a host's NVIDIA driver state (packages, apt candidates, loaded driver, NVSwitches, services, files)
version_added: 0.1.0
description:
  - Reads what a Debian-family GPU node says about its NVIDIA driver, in one call.
  - The installed NVIDIA driver packages (C(dpkg-query)); for the packages in
    O(packages), the version installed, the candidate and every version apt
    offers (C(apt-cache policy)), which is what the P(smshare.kai.nvidia_driver#role)
    role needs to choose a driver version within a pinned branch.
  - The loaded driver as a state (V(ok), V(not_loaded), V(mismatch) after an
    upgrade without a reboot, V(absent) without C(nvidia-smi)), from C(nvidia-smi)
    and C(/proc/driver/nvidia/version).
  - NVSwitches on the PCI bus (vendor C(0x10de), class C(0x0680xx) in
    C(/sys/bus/pci/devices)), and the state of the C(nvidia-fabricmanager) and
    C(nvidia-persistenced) units.
  - With V(preferences), the apt preferences records that give NVIDIA's repository a
    negative priority (as M(smshare.kai.apt_negative_pins) finds them, changing nothing);
    with V(files), the state of the files in O(paths) (type, mode, owner, a sha256 of
    the content, the fields of a deb822 C(.sources) file). One call with every gather
    is what the P(smshare.kai.nvidia_driver#role) role plans its steps from.
  - With V(host), the host facts the P(smshare.kai.nvidia_driver#role) role needs (distribution, architecture,
    kernel, container runtime), named as Ansible's facts, so that the role runs no C(setup).
  - It never returns the text of a system file, only what it parsed.
extends_documentation_fragment:
  - smshare.kai.attributes
  - smshare.kai.attributes.info_module
options:
  packages:
    description:
      - Debian package names to read apt's view of (installed, candidate, offered versions).
      - Empty reads nothing from apt's cache.
    type: list
    elements: str
    default: []
  pin_origins:
    description:
      - "With V(preferences) in O(gather), the host names of NVIDIA's repository and its
        mirrors whose negative pins to find (C(Pin: origin)); C(Pin: release o=NVIDIA) is always looked for."
    type: list
    elements: str
    default: [developer.download.nvidia.com]
  paths:
    description:
      - With V(files) in O(gather), the absolute paths to read the state of.
      - With V(host) too, the running kernel's build tree (C(/lib/modules/<release>/build)) is read as well.
    type: list
    elements: path
    default: []
  dirs:
    description:
      - With V(files) in O(gather), folders whose every entry is read as a path of O(paths) is; a path in
        one of them that is not in RV(files) does not exist.
      - For files whose names depend on the host facts this run returns (the distribution's apt sources).
    type: list
    elements: path
    default: []
  gather:
    description:
      - What to read; the others are left out of the result. C(nvidia-smi) can take
        seconds on a node whose GPUs are not kept initialised, so callers that only
        need packages leave V(driver) out.
      - V(packages) gives RV(installed), RV(apt), RV(unfinished) and RV(dpkg_interrupted), V(driver) RV(driver),
        V(nvswitches) RV(nvswitch_count), V(services) RV(services),
        V(preferences) RV(negative_pins), V(files) RV(files) and RV(listed_dirs), V(host) RV(host).
    type: list
    elements: str
    choices: [packages, driver, nvswitches, services, preferences, files, host]
    default: [packages, driver, nvswitches, services]
notes:
  - RV(apt) gives each version as its Debian version (C(615.71.09-0ubuntu1)) and
    its upstream part (C(615.71.09)), which is what the driver and Fabric Manager
    must share. The Debian revisions of the two may differ.
seealso:
  - module: smshare.kai.gpu_info
  - module: smshare.kai.apt_negative_pins
author:
  - smshare.kai maintainers (@smshare)
"""

EXAMPLES = r"""
- name: Read the driver state and what apt offers
  smshare.kai.nvidia_driver_info:
    packages: [nvidia-driver-open, nvidia-fabricmanager]
  register: driver_info

- name: Read only what apt offers (no nvidia-smi call)
  smshare.kai.nvidia_driver_info:
    packages: [nvidia-driver-open]
    gather: [packages]

- name: Report the versions apt offers for the driver
  ansible.builtin.debug:
    msg: "{{ driver_info.apt['nvidia-driver-open'].versions }}"
"""

RETURN = r"""
installed:
  description: Installed NVIDIA driver packages and the ones in O(packages) (name to Debian version).
  returned: when O(gather) has V(packages)
  type: dict
  sample: {"nvidia-driver-open": "615.71.09-1", "nvidia-driver-pinning-615": "615.71.09-1",
           "nvidia-fabricmanager": "615.71.09-2", "cuda-keyring": "1.1-1"}
unfinished:
  description:
    - Every package dpkg left part way (unpacked, half-configured, half-installed, awaiting
      triggers, or needing a reinstall), as a run of dpkg or apt killed mid-way leaves them;
      apt refuses other installs until they are finished.
  returned: when O(gather) has V(packages)
  type: list
  elements: dict
  sample: [{"package": "nvidia-persistenced", "version": "615.71.09-1", "status": "unpacked, not configured"}]
dpkg_interrupted:
  description: Whether dpkg's journal (C(/var/lib/dpkg/updates)) holds a run it did not finish.
  returned: when O(gather) has V(packages)
  type: bool
  sample: false
apt:
  description:
    - Per package of O(packages), apt's view; empty when O(packages) is empty.
    - Each version is given as Debian version and its upstream part, which is
      what the driver, Fabric Manager and NSCQ must share (their Debian revisions may differ).
  returned: when O(gather) has V(packages)
  type: dict
  contains:
    installed:
      description: The installed version (C(version), C(upstream)), null when not installed.
      type: dict
    candidate:
      description: The version apt would install, null when none (no repository offers it, or a pin forbids it).
      type: dict
    versions:
      description: Every version apt knows (C(version), C(upstream)), newest first.
      type: list
      elements: dict
  sample: {"nvidia-fabricmanager": {"installed": null,
                                    "candidate": {"version": "615.71.09-2", "upstream": "615.71.09"},
                                    "versions": [{"version": "615.71.09-2", "upstream": "615.71.09"},
                                                 {"version": "615.71.09-1", "upstream": "615.71.09"}]}}
driver:
  description: The loaded driver.
  returned: when O(gather) has V(driver)
  type: dict
  contains:
    state:
      description: V(ok), V(not_loaded), V(mismatch) (the loaded module is not the installed library) or V(absent).
      type: str
    version:
      description: Version nvidia-smi reports, when V(ok).
      type: str
    branch:
      description: Its major number.
      type: int
    library_version:
      description: The user-space library version nvidia-smi names on a mismatch.
      type: str
    kernel_module_version:
      description: Version of the loaded kernel module (C(/proc/driver/nvidia/version)), empty when none.
      type: str
  sample: {"state": "mismatch", "version": null, "branch": null, "library_version": "615.71",
           "kernel_module_version": "580.95.05"}
nvswitch_count:
  description: NVSwitches on the PCI bus; null when the PCI devices could not be listed.
  returned: when O(gather) has V(nvswitches)
  type: int
  sample: 6
services:
  description: State of the C(nvidia-fabricmanager) and C(nvidia-persistenced) units (load, enabled, active); null values without systemd.
  returned: when O(gather) has V(services)
  type: dict
  sample: {"nvidia-fabricmanager": {"load": "loaded", "enabled": "enabled", "active": "active"},
           "nvidia-persistenced": {"load": "not-found", "enabled": null, "active": "inactive"}}
negative_pins:
  description: The preferences records that give NVIDIA's repository a negative priority for O(packages)
    (or the driver's packages when O(packages) is empty).
  returned: when O(gather) has V(preferences)
  type: list
  elements: dict
  sample: [{"file": "/etc/apt/preferences.d/freeze-nvidia.pref", "line": 2, "pin": "Pin: release o=NVIDIA",
            "package": "*", "priority": -10}]
files:
  description:
    - Per path of O(paths), C(exists) and, when it does, C(type) (V(file), V(directory), V(link), V(other); a link is
      not followed), C(mode) (octal string), C(uid), C(gid); for a file C(sha256) of its content (or C(unreadable)),
      and for a C(.sources) file C(paragraphs), its deb822 fields.
  returned: when O(gather) has V(files)
  type: dict
  sample: {"/etc/modprobe.d/blacklist-nouveau.conf": {"exists": true, "type": "file", "mode": "0644", "uid": 0,
           "gid": 0, "sha256": "9f2c..."}, "/lib/modules/6.1.0-40-amd64/build": {"exists": false}}
listed_dirs:
  description: The folders of O(dirs) that exist (every entry of each is in RV(files)).
  returned: when O(gather) has V(files)
  type: list
  elements: str
  sample: ["/etc/apt/sources.list.d"]
host:
  description:
    - The host facts the P(smshare.kai.nvidia_driver#role) role needs, named as Ansible's facts, so that it needs no
      C(setup) run of its own. C(virtualization_type) is the container runtime (C(podman), C(docker), C(lxc), ...)
      when the host is a container (C(virtualization_role) then C(guest)), else empty; virtual machines are not told
      apart from hosts.
  returned: when O(gather) has V(host)
  type: dict
  sample: {"distribution": "Debian", "distribution_version": "12.8", "distribution_major_version": "12",
           "architecture": "x86_64", "kernel": "6.1.0-40-amd64", "virtualization_type": "", "virtualization_role": ""}
failure:
  description:
    - Name of the failure.
    - V(bad_input) (a parameter breaks a rule), V(not_debian) (no dpkg-query or apt-cache),
      V(dpkg_query_failed), V(apt_cache_failed), V(unparsable) (output in an unexpected format),
      V(failed) (nvidia-smi failed for another reason).
  returned: failure
  type: str
cmd:
  description: The command that failed.
  returned: failure, when a command ran
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.apt import (
    ORIGIN_HOST_NAME,
    NVIDIA_RELEASE_ORIGINS,
    PACKAGE_NAME,
    Apt,
    dpkg_interrupted,
    find_negative_pins,
    upstream_version,
)
from ansible_collections.smshare.kai.plugins.module_utils import host_facts
from ansible_collections.smshare.kai.plugins.module_utils.driver_plan import file_state
from ansible_collections.smshare.kai.plugins.module_utils.nvidia_smi import (
    NvidiaSmi,
    count_nvswitches,
    kernel_module_version,
)
from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError
from ansible_collections.smshare.kai.plugins.module_utils.systemd import unit_states

# dpkg patterns of the packages a host-installed NVIDIA driver consists of.
DRIVER_PACKAGES = ["nvidia-driver-pinning-*", "nvidia-driver-open", "nvidia-driver-*-open",
                   "nvidia-dkms-*", "nvidia-fabricmanager*", "libnvidia-nscq*", "nvidia-persistenced",
                   "cuda-keyring"]
UNITS = ["nvidia-fabricmanager.service", "nvidia-persistenced.service"]
# The packages whose negative pins block the driver when O(packages) names none.
PINNED_PACKAGES = ["nvidia-driver-open", "nvidia-fabricmanager", "libnvidia-nscq"]
PREFERENCES_DIR = "/etc/apt/preferences.d"
GATHER = ["packages", "driver", "nvswitches", "services", "preferences", "files", "host"]


def check_package(name, value):
    validate.text(name, value, example="nvidia-driver-open", pattern=PACKAGE_NAME, positional=True,
                  rule="must be a Debian package name (lowercase letters, digits, '+', '-', '.')")


def check_origin(name, value):
    validate.text(name, value, example="developer.download.nvidia.com", pattern=ORIGIN_HOST_NAME,
                  rule="must be a host name, as apt shows it in `Pin: origin`")


def check_path(name, value):
    validate.text(name, value, example="/etc/modprobe.d/blacklist-nouveau.conf", pattern=r"/.*",
                  rule="must be an absolute path")


def version(debian_version):
    if debian_version is None:
        return None
    return {"version": debian_version, "upstream": upstream_version(debian_version)}


def apt_view(apt, names):
    return dict((name, {"installed": version(entry["installed"]), "candidate": version(entry["candidate"]),
                        "versions": [version(v["version"]) for v in entry["versions"]]})
                for name, entry in apt.policy(names).items())


def read(module, packages, gather, pin_origins=(), paths=(), dirs=()):
    result = {}
    paths = list(paths)
    if "host" in gather:
        result["host"] = host_facts.read()
        paths.append("/lib/modules/%s/build" % result["host"]["kernel"])
    if "driver" in gather:
        driver = NvidiaSmi(module).driver_state()
        driver["kernel_module_version"] = kernel_module_version()
        result["driver"] = driver
    if "services" in gather:
        services = unit_states(module, UNITS)
        result["services"] = dict((unit[:-len(".service")], state) for unit, state in services.items())
    if "packages" in gather:
        apt = Apt(module)
        result["installed"] = apt.installed(DRIVER_PACKAGES + [p for p in packages if p not in DRIVER_PACKAGES])
        result["unfinished"] = apt.unfinished()
        result["dpkg_interrupted"] = dpkg_interrupted()
        result["apt"] = apt_view(apt, packages)
    if "nvswitches" in gather:
        result["nvswitch_count"] = count_nvswitches()
    if "preferences" in gather:
        found = find_negative_pins(PREFERENCES_DIR, list(pin_origins), list(NVIDIA_RELEASE_ORIGINS),
                                   list(packages) or PINNED_PACKAGES)
        result["negative_pins"] = [dict((k, v) for k, v in pin.items() if k != "lines")
                                   for _path, _text, pins in found for pin in pins]
    if "files" in gather:
        for folder in dirs:
            try:
                paths += [os.path.join(folder, name) for name in sorted(os.listdir(folder))]
            except OSError:
                pass
        result["files"] = dict((path, file_state(path)) for path in paths)
        result["listed_dirs"] = [folder for folder in dirs if os.path.isdir(folder)]
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", default=[]),
            pin_origins=dict(type="list", elements="str", default=["developer.download.nvidia.com"]),
            paths=dict(type="list", elements="path", default=[]),
            dirs=dict(type="list", elements="path", default=[]),
            gather=dict(type="list", elements="str", choices=GATHER, default=GATHER[:4]),
        ),
        supports_check_mode=True,
    )
    try:
        validate.items("packages", module.params["packages"], example="[nvidia-driver-open]", minimum=0,
                       each=check_package)
        validate.items("gather", module.params["gather"], example="[packages, driver]")
        validate.items("pin_origins", module.params["pin_origins"], example="[developer.download.nvidia.com]",
                       each=check_origin)
        validate.items("paths", module.params["paths"], example="[/etc/modprobe.d/blacklist-nouveau.conf]",
                       minimum=0, each=check_path)
        validate.items("dirs", module.params["dirs"], example="[/etc/apt/sources.list.d]", minimum=0,
                       each=check_path)
        result = read(module, module.params["packages"], module.params["gather"],
                      module.params["pin_origins"], module.params["paths"], module.params["dirs"])
    except ToolError as exc:
        module.fail_json(msg=exc.msg, **exc.details())
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

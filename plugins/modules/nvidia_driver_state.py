# -*- coding: utf-8 -*-
# Apache-2.0

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: nvidia_driver_state
short_description: Read a host's NVIDIA driver state in one call
version_added: 0.1.0
description:
  - Reads, in one round trip, what the nvidia_driver role needs to decide what
    to do on a Debian-family host.
  - The installed NVIDIA packages (C(dpkg-query)), the apt preferences entries
    that give NVIDIA's repository a negative priority, the CUDA sources entry,
    the driver that C(nvidia-smi) reports, the loaded kernel module, NVSwitch
    devices on the PCI bus, Fabric Manager's unit state and whether the host is
    a container.
  - With O(remove_negative_pins=true) it also removes those preferences entries.
  - With O(candidates) it also reads the versions apt offers for those packages.
options:
  nvidia_origins:
    description:
      - "Host names that count as NVIDIA's repository in C(Pin: origin) records."
    type: list
    elements: str
    default: [developer.download.nvidia.com]
  nvidia_release_origins:
    description:
      - "Values of the Release file's Origin or Label that count as NVIDIA's in
        C(Pin: release o=...) or C(l=...) records."
    type: list
    elements: str
    default: [NVIDIA, NVIDIA CUDA]
  remove_negative_pins:
    description:
      - Remove the records that give NVIDIA's repository a negative priority
        (the whole record, from C(Package:) to its blank line). A file left
        without records is deleted.
    type: bool
    default: false
  sources_file:
    description: The apt sources file of the CUDA repository to read.
    type: path
  candidates:
    description:
      - Packages whose available versions and candidate apt should report
        (C(apt-cache policy)). Empty reads nothing from apt's cache.
    type: list
    elements: str
    default: []
  query_driver:
    description: Run C(nvidia-smi) to read the loaded driver's version.
    type: bool
    default: true
  preferences_dir:
    description:
      - The apt preferences folder; the single preferences file next to it
        (C(/etc/apt/preferences)) is read too.
    type: path
    default: /etc/apt/preferences.d
attributes:
  check_mode:
    support: full
    description: In check mode entries are reported as removed but left in place.
  diff_mode:
    support: full
    description: With O(remove_negative_pins=true), shows each preferences file before and after.
  idempotent:
    support: full
    description: A second run finds nothing left to remove.
author:
  - smshare.kai maintainers (@smshare)
'''

EXAMPLES = r'''
- name: Read the driver state
  smshare.kai.nvidia_driver_state:
    sources_file: /etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list
  register: driver_state

- name: Remove negative NVIDIA pins and list the driver versions apt offers
  smshare.kai.nvidia_driver_state:
    remove_negative_pins: true
    candidates: [nvidia-driver-open, nvidia-fabricmanager]
'''

RETURN = r'''
packages:
  description: Installed packages of interest (name to version).
  returned: always
  type: dict
  sample: {"nvidia-driver-open": "615.71.09-1", "nvidia-driver-pinning-615": "615.71.09-1"}
negative_pins:
  description: Preferences records that give NVIDIA's repository a negative priority.
  returned: always
  type: list
  elements: dict
  sample: [{"file": "/etc/apt/preferences.d/no-nvidia", "line": 2,
            "pin": "Pin: origin developer.download.nvidia.com", "priority": -1}]
sources:
  description: Text of O(sources_file), empty when absent.
  returned: always
  type: str
smi:
  description: What C(nvidia-smi --query-gpu=driver_version --format=csv,noheader) said.
  returned: always
  type: dict
  sample: {"state": "ok", "rc": 0, "versions": ["615.71.09"], "stdout": "615.71.09", "stderr": ""}
kernel_module_version:
  description: Version in /proc/driver/nvidia/version, empty when no module is loaded.
  returned: always
  type: str
nvswitch_count:
  description: NVSwitch devices (vendor 0x10de, class 0x0680) on the PCI bus.
  returned: always
  type: int
fabricmanager:
  description: C(nvidia-fabricmanager.service) state.
  returned: always
  type: dict
  sample: {"enabled": "enabled", "active": "active"}
in_container:
  description: Whether the host is a container (no kernel of its own to reboot).
  returned: always
  type: bool
candidates:
  description: Per package of O(candidates), the candidate and the available versions.
  returned: when O(candidates) is not empty
  type: dict
  sample: {"nvidia-driver-open": {"candidate": "615.71.09-1", "versions": ["615.71.09-1", "580.95.05-1"]}}
'''

import os
import re

from ansible.module_utils.basic import AnsibleModule

PACKAGE_PATTERNS = ["nvidia-driver-pinning-*", "nvidia-driver-open", "nvidia-fabricmanager",
                    "cuda-keyring"]


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


def installed_packages(module):
    cmd = [module.get_bin_path("dpkg-query", required=True), "-W",
           "-f=${db:Status-Abbrev}\t${Package}\t${Version}\n"] + PACKAGE_PATTERNS
    rc, out, err = module.run_command(cmd, environ_update={"LC_ALL": "C"})
    # rc 1: some pattern matched nothing, the others are still listed.
    if rc not in (0, 1):
        module.fail_json(msg="dpkg-query failed", cmd=cmd, rc=rc, stdout=out, stderr=err)
    packages = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0].startswith("ii"):
            packages[fields[1]] = fields[2]
    return packages


def records(text):
    """Yield (first line number, [(line number, raw line)]) per record."""
    current = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            current.append((number, line))
        elif current:
            yield current
            current = []
    if current:
        yield current


def is_nvidia_pin(pin, origins, release_origins):
    value = pin.split(":", 1)[1].strip()
    if value.startswith("origin"):
        host = value[len("origin"):].strip().strip('"')
        return host in origins
    if value.startswith("release"):
        for item in value[len("release"):].split(","):
            key, _sep, found = item.strip().partition("=")
            if key in ("o", "l") and found.strip().strip('"') in release_origins:
                return True
    return False


def negative_pins(module, files):
    found = []
    for path in files:
        for record in records(read_text(path)):
            fields = {}
            for number, line in record:
                if line.lstrip().startswith("#") or ":" not in line:
                    continue
                key = line.split(":", 1)[0].strip().lower()
                fields.setdefault(key, (number, line.strip()))
            if "pin" not in fields or "pin-priority" not in fields:
                continue
            try:
                priority = int(fields["pin-priority"][1].split(":", 1)[1].strip())
            except ValueError:
                continue
            if priority < 0 and is_nvidia_pin(fields["pin"][1], module.params["nvidia_origins"],
                                              module.params["nvidia_release_origins"]):
                found.append({"file": path, "line": fields["pin"][0], "pin": fields["pin"][1],
                              "priority": priority,
                              "lines": [record[0][0], record[-1][0]]})
    return found


def preference_files(folder):
    # The single file sits next to the folder (/etc/apt/preferences).
    single = os.path.join(os.path.dirname(folder.rstrip("/")), "preferences")
    files = [single] if os.path.isfile(single) else []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    # apt reads files without an extension or ending in .pref, ignoring the rest.
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and re.match(r"^[A-Za-z0-9_.-]+$", name) and \
                ("." not in name or name.endswith(".pref")):
            files.append(path)
    return files


def remove_records(module, found):
    diffs = []
    by_file = {}
    for entry in found:
        by_file.setdefault(entry["file"], []).append(entry["lines"])
    for path, spans in by_file.items():
        before = read_text(path)
        kept = [line for number, line in enumerate(before.splitlines(True), 1)
                if not any(first <= number <= last for first, last in spans)]
        after = re.sub(r"\n{3,}", "\n\n", "".join(kept))
        has_records = any(line.strip() and not line.lstrip().startswith("#")
                          for line in after.splitlines())
        diffs.append({"before_header": path, "after_header": path if has_records else "(deleted)",
                      "before": before, "after": after if has_records else ""})
        if module.check_mode:
            continue
        if has_records:
            with open(path, "w") as handle:
                handle.write(after)
        else:
            os.remove(path)
    return diffs


def query_smi(module):
    smi = module.get_bin_path("nvidia-smi")
    if not smi:
        return {"state": "absent", "rc": None, "versions": [], "stdout": "", "stderr": ""}
    cmd = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
    rc, out, err = module.run_command(cmd, environ_update={"LC_ALL": "C"})
    text = out + err
    if rc == 0:
        state = "ok"
    elif "Driver/library version mismatch" in text:
        state = "mismatch"
    elif "couldn't communicate with the NVIDIA driver" in text:
        state = "not_loaded"
    else:
        state = "error"
    versions = [line.strip() for line in out.splitlines() if rc == 0 and line.strip()]
    library = re.search(r"NVML library version: (\S+)", text)
    return {"state": state, "rc": rc, "versions": versions, "stdout": out.strip(),
            "stderr": err.strip(), "cmd": cmd,
            "library_version": library.group(1) if library else ""}


def kernel_module_version():
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)",
                      read_text("/proc/driver/nvidia/version"))
    return match.group(1) if match else ""


def nvswitch_count(root="/sys/bus/pci/devices"):
    count = 0
    try:
        devices = os.listdir(root)
    except OSError:
        return 0
    for device in devices:
        vendor = read_text(os.path.join(root, device, "vendor")).strip()
        klass = read_text(os.path.join(root, device, "class")).strip()
        if vendor == "0x10de" and klass.startswith("0x0680"):
            count += 1
    return count


def fabricmanager_state(module):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {"enabled": "", "active": ""}
    cmd = [systemctl, "show", "nvidia-fabricmanager.service",
           "--property=UnitFileState", "--property=ActiveState"]
    rc, out, err = module.run_command(cmd, environ_update={"LC_ALL": "C"})
    if rc != 0:
        # No running systemd (a chroot, a container without init): unknown.
        return {"enabled": "", "active": "", "error": err.strip()}
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {"enabled": props.get("UnitFileState", ""), "active": props.get("ActiveState", "")}


def in_container():
    if os.path.exists("/run/.containerenv") or os.path.exists("/.dockerenv"):
        return True
    return bool(read_text("/run/systemd/container").strip())


def apt_candidates(module, names):
    cmd = [module.get_bin_path("apt-cache", required=True), "policy"] + names
    rc, out, err = module.run_command(cmd, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="apt-cache policy failed", cmd=cmd, rc=rc, stdout=out, stderr=err)
    result = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = result.setdefault(line[:-1], {"candidate": "", "versions": []})
        elif current is not None and line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            current["candidate"] = "" if value == "(none)" else value
        elif current is not None:
            match = re.match(r"^ (?:\*\*\*| {3}) (\S+) (-?\d+)$", line)
            if match:
                current["versions"].append(match.group(1))
    for name in names:
        result.setdefault(name, {"candidate": "", "versions": []})
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_origins=dict(type="list", elements="str",
                                default=["developer.download.nvidia.com"]),
            nvidia_release_origins=dict(type="list", elements="str",
                                        default=["NVIDIA", "NVIDIA CUDA"]),
            remove_negative_pins=dict(type="bool", default=False),
            sources_file=dict(type="path"),
            candidates=dict(type="list", elements="str", default=[]),
            query_driver=dict(type="bool", default=True),
            preferences_dir=dict(type="path", default="/etc/apt/preferences.d"),
        ),
        supports_check_mode=True,
    )
    result = {"changed": False}
    result["packages"] = installed_packages(module)
    found = negative_pins(module, preference_files(module.params["preferences_dir"]))
    result["negative_pins"] = found
    if found and module.params["remove_negative_pins"]:
        diffs = remove_records(module, found)
        result["changed"] = True
        result["removed_pins"] = found
        result["negative_pins"] = [] if not module.check_mode else found
        if module._diff:
            result["diff"] = diffs
    result["sources"] = read_text(module.params["sources_file"]) if module.params["sources_file"] else ""
    result["smi"] = query_smi(module) if module.params["query_driver"] else {}
    result["kernel_module_version"] = kernel_module_version()
    result["nvswitch_count"] = nvswitch_count()
    result["fabricmanager"] = fabricmanager_state(module)
    result["in_container"] = in_container()
    if module.params["candidates"]:
        result["candidates"] = apt_candidates(module, module.params["candidates"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()

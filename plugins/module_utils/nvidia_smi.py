# -*- coding: utf-8 -*-
# Apache-2.0
"""nvidia-smi: the queries gpu_info runs and their parsers.

Queries use `--query-gpu=<fields> --format=csv,nounits` (with the header, so
the columns are checked, never assumed). The CUDA version is not a query field:
it is read from the banner of the default table ("CUDA Version: X.Y").
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.smshare.kai.plugins.module_utils import csv_output
from ansible_collections.smshare.kai.plugins.module_utils.runner import CommandRunner, ToolError

BINARY = "nvidia-smi"

# field -> (header, converter). Headers are those nvidia-smi prints.
GPU_FIELDS = [
    ("index", "index", int),
    ("uuid", "uuid", str),
    ("name", "name", str),
    ("pci.bus_id", "pci.bus_id", str),
    ("memory.total", "memory.total [MiB]", int),
    ("compute_mode", "compute_mode", str),
    ("mig.mode.current", "mig.mode.current", str),
    ("persistence_mode", "persistence_mode", str),
    ("compute_cap", "compute_cap", str),
    ("driver_version", "driver_version", str),
]
# Queried on its own: drivers that do not know it answer "not a valid field".
# (unverified) field name; None when the driver does not report it.
OPTIONAL_FIELDS = [("multiprocessor_count", "multiprocessor_count", int)]

RESULT_KEYS = {"pci.bus_id": "pci_bus_id", "memory.total": "memory_total_mib",
               "mig.mode.current": "mig_mode"}

NOT_LOADED_RE = re.compile(r"couldn't communicate with the NVIDIA driver", re.I)
MISMATCH_RE = re.compile(r"Driver/library version mismatch", re.I)
NVML_VERSION_RE = re.compile(r"NVML library version:\s*(\S+)")
INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')
CUDA_VERSION_RE = re.compile(r"CUDA Version:\s*([0-9.]+)")
NVIDIA_VENDOR = "0x10de"
NVSWITCH_CLASS_PREFIX = "0x0680"
# Where the PCI devices are (lab nodes and Molecule containers mount a stand-in tree here).
PCI_DEVICES = "/sys/bus/pci/devices"
# What the loaded kernel module says about itself.
KERNEL_MODULE_VERSION_FILE = "/proc/driver/nvidia/version"
KERNEL_MODULE_RE = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")
# Driver states driver_state() reports, from the named failures of check_driver().
DRIVER_STATES = {"driver_not_loaded": "not_loaded", "driver_library_mismatch": "mismatch",
                 "nvidia_smi_missing": "absent"}


class NvidiaSmiError(ToolError):
    """A failed or unparsable nvidia-smi call."""


def check_driver(result):
    """Raise the named failures every nvidia-smi call can meet."""
    text = result.stdout + result.stderr
    if MISMATCH_RE.search(text):
        lib = NVML_VERSION_RE.search(text)
        raise NvidiaSmiError(
            "NVIDIA driver/library version mismatch: the loaded kernel module is not the "
            "installed driver%s. This is what a driver upgrade without a reboot leaves: "
            "reboot the node (drain it first)." % (
                " (user-space library %s)" % lib.group(1) if lib else ""),
            result, kind="driver_library_mismatch")
    if NOT_LOADED_RE.search(text):
        raise NvidiaSmiError(
            "the NVIDIA driver is not loaded (nvidia-smi cannot talk to it): install the driver "
            "and reboot, or load the kernel module", result, kind="driver_not_loaded")


def parse_csv(out, fields):
    rows = []
    for cells in csv_output.parse_csv(out, [f[1] for f in fields]):
        row = {}
        for (field, _header, convert), cell in zip(fields, cells):
            key = RESULT_KEYS.get(field, field)
            if cell.startswith("[") or cell in ("N/A", "[N/A]"):
                row[key] = None  # [N/A], [Not Supported]: not reported
                continue
            row[key] = convert(cell)
        rows.append(row)
    return rows


def parse_cuda_version(out):
    match = CUDA_VERSION_RE.search(out)
    if not match:
        raise ValueError("no 'CUDA Version:' in the banner")
    return match.group(1)


def count_nvswitches(pci_devices_path=None):
    """NVSwitches are PCI bridges (class 0x0680xx) of vendor 0x10de; None when
    the PCI devices cannot be listed."""
    pci_devices_path = pci_devices_path or PCI_DEVICES
    count = 0
    try:
        entries = sorted(os.listdir(pci_devices_path))
    except (IOError, OSError):
        return None
    for entry in entries:
        try:
            with open(os.path.join(pci_devices_path, entry, "vendor")) as handle:
                vendor = handle.read().strip().lower()
            with open(os.path.join(pci_devices_path, entry, "class")) as handle:
                pci_class = handle.read().strip().lower()
        except (IOError, OSError):
            continue
        if vendor == NVIDIA_VENDOR and pci_class.startswith(NVSWITCH_CLASS_PREFIX):
            count += 1
    return count


def kernel_module_version(path=None):
    """The loaded NVIDIA kernel module's version, "" when none is loaded."""
    try:
        with open(path or KERNEL_MODULE_VERSION_FILE) as handle:
            match = KERNEL_MODULE_RE.search(handle.read())
    except (IOError, OSError):
        return ""
    return match.group(1) if match else ""


def branch_of(version):
    """615 for '615.71.09'; None when the version does not start with a number."""
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


class NvidiaSmi:
    def __init__(self, module):
        self.runner = CommandRunner(module, BINARY)

    @property
    def available(self):
        return self.runner.available

    def run(self, args):
        if not self.runner.available:
            raise NvidiaSmiError("nvidia-smi is not installed: install the NVIDIA driver "
                                 "(nvidia-smi ships with it)", kind="nvidia_smi_missing")
        result = self.runner.run(args)
        check_driver(result)
        return result

    def query(self, fields):
        args = ["--query-gpu=%s" % ",".join(f[0] for f in fields), "--format=csv,nounits"]
        result = self.run(args)
        if result.rc != 0:
            invalid = INVALID_FIELD_RE.search(result.stdout + result.stderr)
            kind = "invalid_field" if invalid else "failed"
            raise NvidiaSmiError("nvidia-smi %s failed (rc=%d): %s" % (
                " ".join(args), result.rc, (result.stdout + result.stderr).strip()),
                result, kind=kind)
        try:
            return parse_csv(result.stdout, fields)
        except ValueError as exc:
            raise NvidiaSmiError("unexpected output of nvidia-smi %s (%s): %r"
                                 % (" ".join(args), exc, result.stdout), result, kind="unparsable")

    def gpus(self):
        gpus = self.query(GPU_FIELDS)
        for field in OPTIONAL_FIELDS:
            key = RESULT_KEYS.get(field[0], field[0])
            try:
                values = self.query([("index", "index", int), field])
            except NvidiaSmiError as exc:
                if exc.kind != "invalid_field":
                    raise
                values = []
            by_index = dict((row["index"], row[key]) for row in values)
            for gpu in gpus:
                gpu[key] = by_index.get(gpu["index"])
        return gpus

    def driver_state(self):
        """The loaded driver as a state, for readers that report rather than fail:
        {state: ok|not_loaded|mismatch|absent, version, branch, library_version}.
        Failures other than the driver's own (unparsable output, a failed call)
        still raise."""
        try:
            rows = self.query([("driver_version", "driver_version", str)])
        except NvidiaSmiError as exc:
            if exc.kind not in DRIVER_STATES:
                raise
            text = (exc.result.stdout + exc.result.stderr) if exc.result is not None else ""
            library = NVML_VERSION_RE.search(text)
            return {"state": DRIVER_STATES[exc.kind], "version": None, "branch": None,
                    "library_version": library.group(1) if library else None}
        versions = sorted(set(row["driver_version"] for row in rows if row["driver_version"]))
        version = versions[0] if versions else None
        return {"state": "ok", "version": version, "branch": branch_of(version), "library_version": None}

    def cuda_version(self):
        result = self.run([])
        if result.rc != 0:
            raise NvidiaSmiError("nvidia-smi failed (rc=%d): %s" % (
                result.rc, (result.stdout + result.stderr).strip()), result)
        try:
            return parse_cuda_version(result.stdout)
        except ValueError as exc:
            raise NvidiaSmiError("unexpected output of nvidia-smi (%s): %r"
                                 % (exc, result.stdout[:400]), result, kind="unparsable")

#!/usr/bin/env python3
# Apache-2.0
"""Write a STAND-IN PCI device tree (lab/standin/pci/<layout>.txt) as the
folders sysfs shows under /sys/bus/pci/devices: one folder per device
address with its vendor, device and class files. Prints the tree's path.
(The layouts are kept as text: device addresses have colons, which a
collection's files may not.)

    lab/standin/pci/make-tree.py hgx-a100-8gpu [OUT]    # OUT: .lab/pci/<layout>
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def devices(layout):
    with open(os.path.join(HERE, layout + ".txt"), encoding="utf-8") as handle:
        for line in handle:
            if line.strip() and not line.startswith("#"):
                yield line.split()


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(__doc__)
        return 2
    layout = argv[0]
    out = argv[1] if len(argv) > 1 else os.path.join(ROOT, ".lab", "pci", layout)
    staging = out + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    for address, vendor, device, pci_class in devices(layout):
        folder = os.path.join(staging, address)
        os.makedirs(folder)
        for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
            with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
                handle.write(value + "\n")
    if os.path.isdir(out):
        # Replace the contents in place: a running container may have it mounted.
        for entry in os.listdir(out):
            shutil.rmtree(os.path.join(out, entry))
        for entry in os.listdir(staging):
            os.rename(os.path.join(staging, entry), os.path.join(out, entry))
        os.rmdir(staging)
    else:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        os.rename(staging, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

# Apache-2.0
"""Build the STAND-IN NVIDIA CUDA apt repository for the lab.

Real package names and dependency relations, fake contents: the driver is a
couple of JSON files that the stand-in nvidia-smi reads (see
/tmp/standin-contract.md, kept in lab/standin/README of the modules engineer).
Two branches (580 and 615), a flat repository per distro id
(<out>/repo/<distro>/x86_64/ with Packages, Release, InRelease, Release.gpg)
signed by a key generated once under <out>/gnupg, and a cuda-keyring .deb
whose sources entry points at <url>/<distro>/x86_64/.

Usage: build_repo.py --out .lab/apt --url http://10.88.0.1:18615 [--broken 615.71.09]
Prints the repository root. Rebuilds only when its inputs changed.
--broken VERSION (the lab's misbehaviour switch, `repo.sh break VERSION`):
that driver version's kernel module package refuses to install (its preinst
fails as a failed module build would), so `apt-get install` of the driver
fails with dpkg's error and the host keeps its old driver loaded.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN_BIN = os.path.join(os.path.dirname(HERE), "bin")
PLACEHOLDER_BIN = os.path.join(HERE, "placeholder")

DISTROS = ("debian12", "ubuntu2404", "ubuntu2204")
ARCH_DIR = "x86_64"
# branch -> (driver version, CUDA version the driver reports)
BRANCHES = {580: ("580.95.05", "13.0"), 615: ("615.71.09", "13.4")}
REVISION = "-1"
KEYRING_VERSION = "1.1-1"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
MAINTAINER = "smshare lab stand-in <lab@smshare.invalid>"
# Reproducible .debs: the same inputs give the same bytes, so hosts whose apt
# lists predate a rebuild (repo.sh break/fix) still verify every other package.
DEB_ENV = dict(os.environ, SOURCE_DATE_EPOCH="1767225600")
# Every package the pinning packages cover.
PINNED = ("nvidia-driver-open nvidia-driver-*-open nvidia-dkms-*-open nvidia-utils-* "
          "nvidia-compute-utils-* libnvidia-compute-* nvidia-fabricmanager")


def tool(name):
    """The shared stand-in tool, or the placeholder until it lands."""
    for folder in (STANDIN_BIN, PLACEHOLDER_BIN):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise SystemExit("missing stand-in tool %s" % name)


def tool_text(name):
    """The tool's text with a python3 shebang (nodes have no `python`)."""
    with open(tool(name), encoding="utf-8") as handle:
        text = handle.read()
    return re.sub(r"\A#!.*python.*\n", "#!/usr/bin/python3\n", text)


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def build_deb(pool, name, version, arch, files, description, depends=None,
              virtual=None, scripts=None):
    """files: {absolute path in the package: (text, mode)}; virtual: a name the
    package provides, conflicts with and replaces (one branch at a time)."""
    root = tempfile.mkdtemp(dir=pool)
    try:
        for path, (text, mode) in files.items():
            write(root + path, text, mode)
        control = ["Package: " + name, "Version: " + version, "Architecture: " + arch,
                   "Maintainer: " + MAINTAINER, "Section: non-free/libs", "Priority: optional"]
        if depends:
            control.append("Depends: " + ", ".join(depends))
        if virtual:
            control += ["Provides: " + virtual, "Conflicts: " + virtual, "Replaces: " + virtual]
        control.append("Description: " + description + " (lab stand-in)\n"
                       " Stand-in package of the smshare lab: the real name and relations,"
                       " no real driver.")
        write(os.path.join(root, "DEBIAN", "control"), "\n".join(control) + "\n")
        for script, text in (scripts or {}).items():
            write(os.path.join(root, "DEBIAN", script), text, 0o755)
        conffiles = [p for p in files if p.startswith("/etc/")]
        if conffiles:
            write(os.path.join(root, "DEBIAN", "conffiles"), "\n".join(conffiles) + "\n")
        target = os.path.join(pool, "%s_%s_%s.deb" % (name, version, arch))
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, target],
                       check=True, stdout=subprocess.DEVNULL, env=DEB_ENV)
        return target
    finally:
        shutil.rmtree(root)


def pin_file(branch):
    return (
        "# nvidia-driver-pinning-%(b)d (lab stand-in): holds the NVIDIA driver\n"
        "# packages on the %(b)d branch. Another branch's pinning package defeats\n"
        "# this one: its catch-all record below is read first for that branch.\n"
        "Package: %(p)s\nPin: version %(b)d.*\nPin-Priority: 1000\n\n"
        "Package: %(p)s\nPin: version *\nPin-Priority: -1\n" % {"b": branch, "p": PINNED})


DRIVER_POSTINST = """#!/bin/sh
# Stand-in of the kernel module install: a fresh host gets the module loaded
# (as nvidia-modprobe would); an upgrade leaves the old one loaded until reboot.
set -e
if [ "$1" = configure ]; then
    mkdir -p /etc/nvidia-standin
    [ -e /etc/nvidia-standin/gpus.json ] || cat > /etc/nvidia-standin/gpus.json <<'JSON'
%(gpus)s
JSON
    if [ ! -e /run/nvidia-standin/loaded.json ] && [ -e /usr/share/nvidia-standin/driver.json ]; then
        mkdir -p /run/nvidia-standin
        cp /usr/share/nvidia-standin/driver.json /run/nvidia-standin/loaded.json
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
    systemctl enable nvidia-standin-load.service >/dev/null 2>&1 || true
fi
"""

BROKEN_PREINST = """#!/bin/sh
# Lab stand-in of a broken driver build (lab/standin/apt/repo.sh break %(version)s).
echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64)" >&2
echo "Consult /var/lib/dkms/nvidia/%(version)s/build/make.log for more information." >&2
echo "(lab stand-in: nvidia-dkms %(version)s was published broken: repo.sh break)" >&2
exit 1
"""

DRIVER_PRERM = """#!/bin/sh
set -e
if [ "$1" = remove ]; then
    systemctl disable nvidia-standin-load.service >/dev/null 2>&1 || true
fi
"""

LOAD_UNIT = """[Unit]
Description=Load the NVIDIA kernel module (lab stand-in)
DefaultDependencies=no
After=local-fs.target
Before=nvidia-fabricmanager.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'mkdir -p /run/nvidia-standin && cp /usr/share/nvidia-standin/driver.json /run/nvidia-standin/loaded.json'

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER = r'''#!/usr/bin/python3
# Apache-2.0
# STAND-IN nv-fabricmanager: refuses to run without NVSwitches or with a loaded
# driver of another version (as the real one does), else stays in the
# foreground like `nv-fabricmanager -c ...` under its systemd unit.
import json
import signal
import sys

VERSION = "%(version)s"


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


loaded = read("/run/nvidia-standin/loaded.json")
hardware = read("/etc/nvidia-standin/gpus.json") or {}
if loaded is None:
    sys.stderr.write("fabric manager failed to open the NVIDIA driver: no driver loaded\n")
    sys.exit(1)
if loaded.get("version") != VERSION:
    sys.stderr.write("fabric manager NVIDIA GPU driver interface version %%s don't match with "
                     "driver version %%s. Please update with matching NVIDIA driver package.\n"
                     %% (VERSION, loaded.get("version")))
    sys.exit(1)
if not hardware.get("nvswitches"):
    sys.stderr.write("request to query NVSwitch device information from NVSwitch driver failed: "
                     "no NVSwitch devices found\n")
    sys.exit(1)
print("Successfully configured all the available NVSwitches to route GPU NVLink traffic (%%d)"
      %% hardware["nvswitches"], flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    signal.pause()
'''

FM_UNIT = """[Unit]
Description=NVIDIA fabric manager service (lab stand-in)
After=nvidia-standin-load.service

[Service]
Type=simple
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
LimitCORE=infinity

[Install]
WantedBy=multi-user.target
"""

DEFAULT_GPUS = {"gpus": [{"name": "NVIDIA A100-SXM4-80GB",
                          "uuid": "GPU-5f2a7c1e-3b8d-4e6f-9a01-c2d3e4f5a6b7",
                          "pci_bus_id": "00000000:07:00.0", "memory_total_mib": 81920,
                          "multiprocessor_count": 108, "compute_cap": "8.0"}],
                "nvswitches": 0}


def branch_packages(pool, branch, broken=()):
    driver, cuda = BRANCHES[branch]
    version = driver + REVISION

    def exact(name):
        return "%s (= %s)" % (name, version)
    info = json.dumps({"version": driver, "branch": branch, "cuda_version": cuda, "open": True})
    debs = [
        build_deb(pool, "nvidia-driver-pinning-%d" % branch, version, "all",
                  {"/etc/apt/preferences.d/nvidia-driver-pinning-%d" % branch:
                   (pin_file(branch), 0o644)},
                  "NVIDIA driver branch %d pin" % branch),
        build_deb(pool, "libnvidia-compute-%d" % branch, version, "amd64",
                  {"/usr/share/nvidia-standin/driver.json": (info + "\n", 0o644)},
                  "NVIDIA libcompute package", virtual="libnvidia-compute"),
        build_deb(pool, "nvidia-utils-%d" % branch, version, "amd64",
                  {"/usr/bin/nvidia-smi": (tool_text("nvidia-smi"), 0o755)},
                  "NVIDIA driver support binaries", depends=[exact("libnvidia-compute-%d" % branch)],
                  virtual="nvidia-utils"),
        build_deb(pool, "nvidia-compute-utils-%d" % branch, version, "amd64",
                  {"/usr/bin/nvidia-cuda-mps-control":
                   (tool_text("nvidia-cuda-mps-control"), 0o755)},
                  "NVIDIA compute utilities", depends=[exact("libnvidia-compute-%d" % branch)],
                  virtual="nvidia-compute-utils"),
        build_deb(pool, "nvidia-dkms-%d-open" % branch, version, "amd64",
                  {"/lib/systemd/system/nvidia-standin-load.service": (LOAD_UNIT, 0o644)},
                  "NVIDIA open kernel module (DKMS)",
                  depends=[exact("libnvidia-compute-%d" % branch)], virtual="nvidia-dkms-kernel",
                  scripts=dict({"postinst": DRIVER_POSTINST % {"gpus": json.dumps(DEFAULT_GPUS, indent=2)},
                                "prerm": DRIVER_PRERM},
                               **({"preinst": BROKEN_PREINST % {"version": driver}} if driver in broken else {}))),
        build_deb(pool, "nvidia-driver-%d-open" % branch, version, "amd64", {},
                  "NVIDIA driver metapackage, open kernel module",
                  depends=[exact(n) for n in ("nvidia-dkms-%d-open" % branch, "nvidia-utils-%d" % branch,
                                              "nvidia-compute-utils-%d" % branch,
                                              "libnvidia-compute-%d" % branch)],
                  virtual="nvidia-driver-any-open"),
        build_deb(pool, "nvidia-driver-open", version, "amd64", {},
                  "NVIDIA driver, open kernel module (follows the pinned branch)",
                  depends=[exact("nvidia-driver-%d-open" % branch)]),
        build_deb(pool, "nvidia-fabricmanager", version, "amd64",
                  {"/usr/bin/nv-fabricmanager": (FABRICMANAGER % {"version": driver}, 0o755),
                   "/lib/systemd/system/nvidia-fabricmanager.service": (FM_UNIT, 0o644),
                   "/usr/share/nvidia/nvswitch/fabricmanager.cfg":
                   ("# lab stand-in\nLOG_LEVEL=4\nFABRIC_MODE=0\n", 0o644)},
                  "Fabric Manager for NVSwitch based systems"),
    ]
    return debs


def keyring_deb(pool, distro, url, key_bytes):
    entry = "deb [signed-by=%s] %s/%s/%s/ /\n" % (KEYRING_PATH, url.rstrip("/"), distro, ARCH_DIR)
    root = tempfile.mkdtemp(dir=pool)
    try:
        write(root + KEYRING_PATH, "", 0o644)
        with open(root + KEYRING_PATH, "wb") as handle:
            handle.write(key_bytes)
        write(root + "/etc/apt/sources.list.d/cuda-%s-%s.list" % (distro, ARCH_DIR), entry)
        write(os.path.join(root, "DEBIAN", "conffiles"),
              "/etc/apt/sources.list.d/cuda-%s-%s.list\n" % (distro, ARCH_DIR))
        write(os.path.join(root, "DEBIAN", "control"),
              "Package: cuda-keyring\nVersion: %s\nArchitecture: all\nMaintainer: %s\n"
              "Section: misc\nPriority: optional\n"
              "Description: GPG keyring and sources entry for the CUDA repository (lab stand-in)\n"
              " Points apt at the smshare lab's stand-in CUDA repository.\n"
              % (KEYRING_VERSION, MAINTAINER))
        target = os.path.join(pool, "cuda-keyring_%s_all.deb" % KEYRING_VERSION)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, target],
                       check=True, stdout=subprocess.DEVNULL, env=DEB_ENV)
        return target
    finally:
        shutil.rmtree(root)


def gpg(gnupg, *args, **kwargs):
    return subprocess.run(["gpg", "--homedir", gnupg, "--batch", "--yes", "--quiet"] + list(args),
                          check=True, stdout=subprocess.PIPE, **kwargs).stdout


def ensure_key(gnupg):
    os.makedirs(gnupg, mode=0o700, exist_ok=True)
    if not gpg(gnupg, "--list-secret-keys", "--with-colons").strip():
        gpg(gnupg, "--passphrase", "", "--quick-gen-key",
            "smshare lab stand-in CUDA repository <lab@smshare.invalid>", "ed25519", "sign", "never")
    return gpg(gnupg, "--export")


def write_index(folder, gnupg):
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=folder, check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    with open(os.path.join(folder, "Packages"), "wb") as handle:
        handle.write(packages)
    with open(os.path.join(folder, "Packages.gz"), "wb") as handle:
        handle.write(gzip.compress(packages, mtime=0))
    sums = {"MD5Sum": hashlib.md5, "SHA256": hashlib.sha256}
    release = ["Origin: NVIDIA", "Label: NVIDIA CUDA", "Architectures: amd64 all",
               "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()),
               "Acquire-By-Hash: no"]
    for field, algo in sums.items():
        release.append(field + ":")
        for name in ("Packages", "Packages.gz"):
            data = open(os.path.join(folder, name), "rb").read()
            release.append(" %s %d %s" % (algo(data).hexdigest(), len(data), name))
    write(os.path.join(folder, "Release"), "\n".join(release) + "\n")
    for name in ("InRelease", "Release.gpg"):
        target = os.path.join(folder, name)
        if os.path.exists(target):
            os.remove(target)
    gpg(gnupg, "--clearsign", "-o", os.path.join(folder, "InRelease"), os.path.join(folder, "Release"))
    gpg(gnupg, "-abs", "-o", os.path.join(folder, "Release.gpg"), os.path.join(folder, "Release"))


def inputs_hash(url, broken=()):
    digest = hashlib.sha256((url + " broken:" + ",".join(sorted(broken))).encode())
    for path in (__file__, tool("nvidia-smi"), tool("nvidia-cuda-mps-control")):
        digest.update(path.encode())
        digest.update(open(path, "rb").read())
    return digest.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="state folder (repo/ and gnupg/ land here)")
    parser.add_argument("--url", required=True, help="base URL the containers reach the repo at")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--broken", action="append", default=[], metavar="VERSION",
                        help="publish this driver version broken (its module package fails to install)")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    repo = os.path.join(out, "repo")
    stamp = os.path.join(out, "repo.stamp")
    wanted = inputs_hash(args.url, args.broken)
    if not args.force and os.path.exists(stamp) and open(stamp).read().strip() == wanted:
        print(repo)
        return 0
    key = ensure_key(os.path.join(out, "gnupg"))
    staging = tempfile.mkdtemp(dir=out, prefix="repo.")
    pool = os.path.join(staging, "pool")
    os.makedirs(pool)
    debs = []
    for branch in sorted(BRANCHES):
        debs += branch_packages(pool, branch, args.broken)
    for distro in DISTROS:
        folder = os.path.join(staging, distro, ARCH_DIR)
        os.makedirs(folder)
        for deb in debs:
            os.link(deb, os.path.join(folder, os.path.basename(deb)))
        keyring_deb(folder, distro, args.url, key)
        write_index(folder, os.path.join(out, "gnupg"))
    shutil.rmtree(pool)
    # gpg leaves an agent running for the key's folder: stop it.
    subprocess.run(["gpgconf", "--homedir", os.path.join(out, "gnupg"), "--kill", "gpg-agent"],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.path.exists(repo):
        shutil.rmtree(repo)
    os.rename(staging, repo)
    write(stamp, wanted + "\n")
    print(repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())

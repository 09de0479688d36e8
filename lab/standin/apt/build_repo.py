# Apache-2.0
"""Build the lab's STAND-IN apt repositories.

1. NVIDIA's CUDA repository (<out>/repo/<distro>/x86_64/, flat, one per
   distro id): real package names, dependency relations and Debian versions,
   fake contents. Two driver branches (580 and 615); per branch the pinning
   package, the driver packages, Fabric Manager and the NSCQ library. The
   programs inside are stand-ins (files/, lab/standin/bin/) that read and write
   the stand-in driver state the stand-in nvidia-smi reads. A cuda-keyring .deb
   whose sources entry points at <url>/<distro>/x86_64/.
2. The distribution's archive, for what the driver role takes from it and a
   hermetic node cannot reach (<out>/repo/distro/, flat): the kernel headers of
   the running kernel (stand-in), initramfs-tools (stand-in) and the real
   Debian packages of python3-debian (deb822_repository needs it), downloaded
   once from the host's Debian mirror.

Debian revisions follow NVIDIA's repositories (REVISIONS): on Ubuntu the
driver packages are -0ubuntu1 while Fabric Manager and NSCQ are -1, and a
package can be republished under a new revision for the same upstream
version (REPACKS). The driver and Fabric Manager must share the upstream
version, never necessarily the Debian revision.

Both are signed by a key generated once under <out>/gnupg (exported as
<out>/repo/distro/standin-archive-key.gpg for the nodes' distribution entry).

Usage: build_repo.py --out .lab/apt --url http://10.88.0.1:18615 [--broken 615.71.09]
Prints the repository root. Rebuilds only when its inputs changed.
--broken VERSION (the lab's misbehaviour switch, `repo.sh break VERSION`):
that driver version's kernel module package refuses to install (its preinst
fails as a failed module build would), so `apt-get install` of the driver
fails with dpkg's error and the host keeps its old driver loaded.
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "files")
STANDIN_BIN = os.path.join(os.path.dirname(HERE), "bin")

# Distro id -> family (which Debian revisions its repository uses).
DISTROS = {"debian12": "debian", "ubuntu2404": "ubuntu", "ubuntu2204": "ubuntu"}
ARCH_DIR = "x86_64"
# branch -> (driver version, CUDA version the driver reports)
BRANCHES = {580: ("580.95.05", "13.0"), 615: ("615.71.09", "13.4")}
# family -> package group -> Debian revision of every branch's first release.
REVISIONS = {
    "debian": {"driver": "1", "fabricmanager": "1", "nscq": "1"},
    "ubuntu": {"driver": "0ubuntu1", "fabricmanager": "1", "nscq": "1"},
}
# (branch, group) -> later revisions of the same upstream version, published
# beside the first: 615's Fabric Manager was repackaged, so its newest Debian
# version (615.71.09-2) differs from the driver's (615.71.09-1 / -0ubuntu1).
REPACKS = {(615, "fabricmanager"): ["2"]}
KEYRING_VERSION = "1.1-1"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
MAINTAINER = "smshare lab stand-in <lab@smshare.invalid>"
# Reproducible .debs: the same inputs give the same bytes, so hosts whose apt
# lists predate a rebuild (repo.sh break/fix) still verify every other package.
DEB_ENV = dict(os.environ, SOURCE_DATE_EPOCH="1767225600")
# Every package the pinning packages hold on their branch.
PINNED = ("nvidia-driver-open nvidia-driver-*-open nvidia-dkms-*-open nvidia-utils-* "
          "nvidia-compute-utils-* libnvidia-compute-* nvidia-fabricmanager libnvidia-nscq")

DISTRO_DIR = "distro"
ARCHIVE_KEY = "standin-archive-key.gpg"
KERNEL = platform.release()
INITRAMFS_TOOLS_VERSION = "0.142+smshare.standin1"
# Real Debian packages the node needs for deb822_repository (and their dependencies).
DEBIAN_PACKAGES = ("python3-debian", "python3-chardet", "python3-pkg-resources")


def file_text(name, **values):
    """A stand-in program or unit from files/ (or lab/standin/bin/), @KEY@ replaced."""
    path = os.path.join(FILES, name)
    if not os.path.isfile(path):
        path = os.path.join(STANDIN_BIN, name)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    # Nodes have python3 only.
    text = re.sub(r"\A#!.*python.*\n", "#!/usr/bin/python3\n", text)
    for key, value in values.items():
        text = text.replace("@%s@" % key.upper(), str(value))
    return text


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def build_deb(pool, name, version, arch, files, description, depends=None,
              virtual=None, scripts=None, links=None, section="non-free/libs"):
    """files: {absolute path in the package: (text, mode)}; links: {path: target};
    virtual: a name the package provides, conflicts with and replaces (one
    branch at a time)."""
    root = tempfile.mkdtemp(dir=pool)
    try:
        for path, (text, mode) in files.items():
            write(root + path, text, mode)
        for path, target in (links or {}).items():
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(target, root + path)
        control = ["Package: " + name, "Version: " + version, "Architecture: " + arch,
                   "Maintainer: " + MAINTAINER, "Section: " + section, "Priority: optional"]
        if depends:
            control.append("Depends: " + ", ".join(depends))
        if virtual:
            control += ["Provides: " + virtual, "Conflicts: " + virtual, "Replaces: " + virtual]
        control.append("Description: " + description + " (lab stand-in)\n"
                       " Stand-in package of the smshare lab: the real name and relations,"
                       " no real contents.")
        write(os.path.join(root, "DEBIAN", "control"), "\n".join(control) + "\n")
        for script, text in (scripts or {}).items():
            write(os.path.join(root, "DEBIAN", script), text, 0o755)
        conffiles = [p for p in files if p.startswith("/etc/")]
        if conffiles:
            write(os.path.join(root, "DEBIAN", "conffiles"), "\n".join(conffiles) + "\n")
        target = os.path.join(pool, "%s_%s_%s.deb" % (name, version.replace(":", "%3a"), arch))
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, target],
                       check=True, stdout=subprocess.DEVNULL, env=DEB_ENV)
        return target
    finally:
        shutil.rmtree(root)


# ---------------------------------------------------------------- NVIDIA's repository
def pin_file(branch):
    return (
        "# nvidia-driver-pinning-%(b)d (lab stand-in): holds the NVIDIA driver\n"
        "# packages on the %(b)d branch. Another branch's pinning package defeats\n"
        "# this one: its catch-all record below is read first for that branch.\n"
        "Package: %(p)s\nPin: version %(b)d.*\nPin-Priority: 1000\n\n"
        "Package: %(p)s\nPin: version *\nPin-Priority: -1\n" % {"b": branch, "p": PINNED})


def driver_packages(pool, branch, revision, broken=()):
    """The pinning package and the driver packages of one branch release;
    a version in broken gets a module package that fails to install."""
    driver, cuda = BRANCHES[branch]
    version = "%s-%s" % (driver, revision)

    def exact(name):
        return "%s (= %s)" % (name, version)
    info = json.dumps({"version": driver, "branch": branch, "cuda_version": cuda, "open": True})
    values = {"version": driver, "branch": branch}
    return [
        build_deb(pool, "nvidia-driver-pinning-%d" % branch, version, "all",
                  {"/etc/apt/preferences.d/nvidia-driver-pinning-%d" % branch: (pin_file(branch), 0o644)},
                  "NVIDIA driver branch %d pin" % branch),
        build_deb(pool, "libnvidia-compute-%d" % branch, version, "amd64",
                  {"/usr/share/nvidia-standin/driver.json": (info + "\n", 0o644)},
                  "NVIDIA libcompute package", virtual="libnvidia-compute"),
        build_deb(pool, "nvidia-utils-%d" % branch, version, "amd64",
                  {"/usr/bin/nvidia-smi": (file_text("nvidia-smi"), 0o755)},
                  "NVIDIA driver support binaries", depends=[exact("libnvidia-compute-%d" % branch)],
                  virtual="nvidia-utils"),
        # As Ubuntu packages it: nvidia-persistenced and its unit ship here,
        # installed but not enabled.
        build_deb(pool, "nvidia-compute-utils-%d" % branch, version, "amd64",
                  {"/usr/bin/nvidia-cuda-mps-control": (file_text("nvidia-cuda-mps-control"), 0o755),
                   "/usr/bin/nvidia-persistenced": (file_text("nvidia-persistenced"), 0o755),
                   "/lib/systemd/system/nvidia-persistenced.service":
                   (file_text("nvidia-persistenced.service"), 0o644)},
                  "NVIDIA compute utilities", depends=[exact("libnvidia-compute-%d" % branch)],
                  virtual="nvidia-compute-utils"),
        build_deb(pool, "nvidia-dkms-%d-open" % branch, version, "amd64",
                  {"/lib/systemd/system/nvidia-standin-load.service":
                   (file_text("nvidia-standin-load.service"), 0o644),
                   "/usr/lib/nvidia-standin/modprobe-nvidia": (file_text("modprobe-nvidia"), 0o755),
                   "/usr/lib/nvidia-standin/discover-gpus": (file_text("discover-gpus"), 0o755)},
                  "NVIDIA open kernel module (DKMS)",
                  depends=[exact("libnvidia-compute-%d" % branch)], virtual="nvidia-dkms-kernel",
                  scripts=dict({"postinst": file_text("dkms.postinst", **values),
                                "prerm": file_text("dkms.prerm", **values)},
                               **({"preinst": file_text("dkms.preinst-broken", **values)}
                                  if driver in broken else {}))),
        build_deb(pool, "nvidia-driver-%d-open" % branch, version, "amd64", {},
                  "NVIDIA driver metapackage, open kernel module",
                  depends=[exact(n) for n in ("nvidia-dkms-%d-open" % branch, "nvidia-utils-%d" % branch,
                                              "nvidia-compute-utils-%d" % branch,
                                              "libnvidia-compute-%d" % branch)],
                  virtual="nvidia-driver-any-open"),
        build_deb(pool, "nvidia-driver-open", version, "amd64", {},
                  "NVIDIA driver, open kernel module (follows the pinned branch)",
                  depends=[exact("nvidia-driver-%d-open" % branch)]),
    ]


def fabricmanager_package(pool, branch, revision):
    driver = BRANCHES[branch][0]
    return build_deb(
        pool, "nvidia-fabricmanager", "%s-%s" % (driver, revision), "amd64",
        {"/usr/bin/nv-fabricmanager": (file_text("nv-fabricmanager", version=driver), 0o755),
         "/lib/systemd/system/nvidia-fabricmanager.service": (file_text("nvidia-fabricmanager.service"), 0o644),
         "/usr/share/nvidia/nvswitch/fabricmanager.cfg": ("# lab stand-in\nLOG_LEVEL=4\nFABRIC_MODE=0\n", 0o644)},
        "Fabric Manager for NVSwitch based systems")


def nscq_package(pool, branch, revision):
    driver = BRANCHES[branch][0]
    library = "/usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.%s" % driver
    return build_deb(
        pool, "libnvidia-nscq", "%s-%s" % (driver, revision), "amd64",
        {library: ("lab stand-in of the NVSwitch Configuration and Query library %s\n" % driver, 0o644)},
        "NVSwitch Configuration and Query (NSCQ) library", links={
            "/usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.2": os.path.basename(library)})


def revisions(family, branch, group):
    return [REVISIONS[family][group]] + REPACKS.get((branch, group), [])


def nvidia_pool(pool, family, broken=()):
    debs = []
    for branch in sorted(BRANCHES):
        debs += driver_packages(pool, branch, REVISIONS[family]["driver"], broken)
        debs += [fabricmanager_package(pool, branch, r) for r in revisions(family, branch, "fabricmanager")]
        debs += [nscq_package(pool, branch, r) for r in revisions(family, branch, "nscq")]
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


# ---------------------------------------------------------------- the distribution's archive
def kernel_headers_package(pool):
    """linux-headers-<running kernel>: what DKMS needs to build a module for it."""
    source = "/usr/src/linux-headers-%s" % KERNEL
    upstream = re.match(r"[0-9]+(\.[0-9]+)*", KERNEL)
    return build_deb(
        pool, "linux-headers-%s" % KERNEL.lower(), "%s-1" % (upstream.group(0) if upstream else "0"), "amd64",
        {source + "/Makefile": ("# lab stand-in of the kernel build tree for %s\n" % KERNEL, 0o644)},
        "Header files for Linux %s" % KERNEL, links={"/lib/modules/%s/build" % KERNEL: source},
        section="kernel")


def initramfs_tools_package(pool):
    return build_deb(
        pool, "initramfs-tools", INITRAMFS_TOOLS_VERSION, "all",
        {"/usr/sbin/update-initramfs": (file_text("update-initramfs"), 0o755)},
        "generic modular initramfs generator", section="utils")


def debian_packages(cache):
    """The real Debian .debs of DEBIAN_PACKAGES, downloaded once into cache."""
    os.makedirs(cache, exist_ok=True)
    found = [p for name in DEBIAN_PACKAGES for p in glob.glob(os.path.join(cache, name + "_*.deb"))]
    if len(found) == len(DEBIAN_PACKAGES):
        return found
    proc = subprocess.run(["apt-get", "download", *DEBIAN_PACKAGES], cwd=cache, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SystemExit("could not download %s from this machine's Debian mirror (run `apt-get update`?):\n%s"
                         % (", ".join(DEBIAN_PACKAGES), proc.stdout))
    return [p for name in DEBIAN_PACKAGES for p in glob.glob(os.path.join(cache, name + "_*.deb"))]


# ---------------------------------------------------------------- indexes and signing
def gpg(gnupg, *args, **kwargs):
    return subprocess.run(["gpg", "--homedir", gnupg, "--batch", "--yes", "--quiet"] + list(args),
                          check=True, stdout=subprocess.PIPE, **kwargs).stdout


def ensure_key(gnupg):
    os.makedirs(gnupg, mode=0o700, exist_ok=True)
    if not gpg(gnupg, "--list-secret-keys", "--with-colons").strip():
        gpg(gnupg, "--passphrase", "", "--quick-gen-key",
            "smshare lab stand-in CUDA repository <lab@smshare.invalid>", "ed25519", "sign", "never")
    return gpg(gnupg, "--export")


def write_index(folder, gnupg, origin, label):
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=folder, check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    with open(os.path.join(folder, "Packages"), "wb") as handle:
        handle.write(packages)
    with open(os.path.join(folder, "Packages.gz"), "wb") as handle:
        handle.write(gzip.compress(packages, mtime=0))
    sums = {"MD5Sum": hashlib.md5, "SHA256": hashlib.sha256}
    release = ["Origin: " + origin, "Label: " + label, "Architectures: amd64 all",
               "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()),
               "Acquire-By-Hash: no"]
    for field, algo in sums.items():
        release.append(field + ":")
        for name in ("Packages", "Packages.gz"):
            with open(os.path.join(folder, name), "rb") as handle:
                data = handle.read()
            release.append(" %s %d %s" % (algo(data).hexdigest(), len(data), name))
    write(os.path.join(folder, "Release"), "\n".join(release) + "\n")
    for name in ("InRelease", "Release.gpg"):
        target = os.path.join(folder, name)
        if os.path.exists(target):
            os.remove(target)
    gpg(gnupg, "--clearsign", "-o", os.path.join(folder, "InRelease"), os.path.join(folder, "Release"))
    gpg(gnupg, "-abs", "-o", os.path.join(folder, "Release.gpg"), os.path.join(folder, "Release"))


def inputs_hash(url, broken=()):
    digest = hashlib.sha256(("%s %s %s broken:%s" % (url, KERNEL, DEBIAN_PACKAGES,
                                                     ",".join(sorted(broken)))).encode())
    paths = [__file__] + sorted(glob.glob(os.path.join(FILES, "*"))) + \
        [os.path.join(STANDIN_BIN, n) for n in ("nvidia-smi", "nvidia-cuda-mps-control")]
    for path in paths:
        digest.update(path.encode())
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:16]


def link_all(debs, folder):
    os.makedirs(folder, exist_ok=True)
    for deb in debs:
        os.link(deb, os.path.join(folder, os.path.basename(deb)))


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
    gnupg = os.path.join(out, "gnupg")
    key = ensure_key(gnupg)
    staging = tempfile.mkdtemp(dir=out, prefix="repo.")
    pools = {}
    for family in sorted(set(DISTROS.values())):
        pools[family] = os.path.join(staging, "pool-" + family)
        os.makedirs(pools[family])
        nvidia_pool(pools[family], family, args.broken)
    for distro, family in sorted(DISTROS.items()):
        folder = os.path.join(staging, distro, ARCH_DIR)
        link_all(glob.glob(os.path.join(pools[family], "*.deb")), folder)
        keyring_deb(folder, distro, args.url, key)
        write_index(folder, gnupg, "NVIDIA", "NVIDIA CUDA")
    distro_folder = os.path.join(staging, DISTRO_DIR)
    os.makedirs(distro_folder)
    kernel_headers_package(distro_folder)
    initramfs_tools_package(distro_folder)
    link_all(debian_packages(os.path.join(out, "debian-debs")), distro_folder)
    write_index(distro_folder, gnupg, "smshare lab stand-in", "Debian (stand-in subset)")
    with open(os.path.join(distro_folder, ARCHIVE_KEY), "wb") as handle:
        handle.write(key)
    for pool in pools.values():
        shutil.rmtree(pool)
    # gpg leaves an agent running for the key's folder: stop it.
    subprocess.run(["gpgconf", "--homedir", gnupg, "--kill", "gpg-agent"],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.path.exists(repo):
        shutil.rmtree(repo)
    os.rename(staging, repo)
    write(stamp, wanted + "\n")
    print(repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())

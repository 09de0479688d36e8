"""Build Kubernetes 1.20.2 from Debian's `kubernetes` source package, cached by version.

Cold: fetch the source (apt-get source --download-only), unpack it, replace the
vendored reflect2 with Debian's (the v1.0.1 copy crashes the apiserver under Go
1.19 on the first custom-resource write), then `make WHAT=cmd/<x>` per binary
with CGO_ENABLED=0. Binaries land in <cache>/kubernetes-<version>/bin; a
binary already there is never rebuilt. Concurrent builds serialize on a lock.
kubectl is not built: Debian ships it from the same source as
`kubernetes-client`: bin/kubectl is unpacked from that package.
"""
import fcntl
import glob
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from .paths import CACHE
from .util import LabError, run, say

CONTROL_PLANE = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
NODE = ["kubelet", "pause"]
ALL = CONTROL_PLANE + NODE

# Built by Debian from the same source: unpacked from its binary package.
PACKAGED = {"kubectl": (Path("/usr/bin/kubectl"), "kubernetes-client")}
DEB_SRC_FILE = Path("/etc/apt/sources.list.d/smshare-lab-deb-src.sources")
REFLECT2_DEBIAN = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")
APT_LOCK = ["-o", "DPkg::Lock::Timeout=600"]
# Every lab of the machine, whatever its cache folder (SMSHARE_LAB_CACHE), takes turns over apt's sources here.
APT_SOURCES_LOCK = Path("/run/lock/smshare-lab-apt-sources.lock")


def _has_deb_src(etc_apt=Path("/etc/apt")):
    files = [etc_apt / "sources.list"] + [Path(p) for p in glob.glob(f"{etc_apt}/sources.list.d/*")]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if ("deb-src" in fields.get("Types", "").split()
                        and "bookworm" in fields.get("Suites", "").split()
                        and "main" in fields.get("Components", "").split()
                        and fields.get("Enabled", "yes") != "no"):
                    return True
        elif path.suffix == ".list" or path.name == "sources.list":
            for line in text.splitlines():
                words = line.split("#")[0].split()
                if words[:1] == ["deb-src"] and "bookworm" in words and "main" in words:
                    return True
    return False


def ensure_deb_src():
    """Add a deb-src entry for bookworm main (a file of ours) when none is configured."""
    if _has_deb_src():
        return
    say(f"adding a deb-src entry for bookworm main: {DEB_SRC_FILE}")
    DEB_SRC_FILE.write_text(
        "# Written by smshare lab/labctl: the Kubernetes source package for the lab.\n"
        "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    run(["apt-get", *APT_LOCK, "update", "-qq"])


def _source_versions():
    """The `kubernetes` source versions apt's lists know (none when they hold no
    sources yet), and what apt said otherwise."""
    res = run(["apt-cache", "showsrc", "--only-source", "kubernetes"], check=False, capture=True)
    if res.returncode != 0:
        return [], " ".join((res.stderr or res.stdout or "").split())
    return re.findall(r"^Version:\s*(\S+)", res.stdout, re.M), ""


def source_version():
    """The version of the `kubernetes` source package apt would fetch.

    Two labs starting at once on a fresh machine take turns here (a lock of the
    machine's, not of a cache folder): one adds the deb-src entry and updates
    apt's lists while the other waits. Without it the other saw the entry and
    asked apt before its lists had sources. An entry whose update never ran (a
    run stopped between the two) is updated now."""
    with open(APT_SOURCES_LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another lab is setting up apt's source lists ({APT_SOURCES_LOCK}): waiting")
            fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_deb_src()
        versions, said = _source_versions()
        if not versions:
            say("apt's lists have no kubernetes sources yet: apt-get update")
            run(["apt-get", *APT_LOCK, "update", "-qq"])
            versions, said = _source_versions()
    if not versions:
        raise LabError("apt knows no `kubernetes` source package: check the deb-src entry "
                       f"({DEB_SRC_FILE}) and run apt-get update" + (f" (apt-cache: {said})" if said else ""))
    best = versions[0]
    for ver in versions[1:]:
        if run(["dpkg", "--compare-versions", ver, "gt", best], check=False).returncode == 0:
            best = ver
    return best


def cache_dir(version):
    return CACHE / f"kubernetes-{version}"


def bin_dir(version):
    return cache_dir(version) / "bin"


def missing(version, targets):
    return [t for t in targets if not (bin_dir(version) / t).is_file()]


def _source_tree(version):
    """Fetch and unpack the source once; patch reflect2. Returns the tree's path."""
    work = CACHE / "src"
    upstream = version.split(":")[-1].rsplit("-", 1)[0]
    tree = work / f"kubernetes-{upstream}"
    stamp = tree / ".smshare-ready"
    if stamp.is_file():
        return tree
    work.mkdir(parents=True, exist_ok=True)
    if tree.exists():
        shutil.rmtree(tree)
    say(f"fetching the kubernetes {version} source package (about 34 MB)")
    run(["apt-get", *APT_LOCK, "source", "--download-only", "-qq", f"kubernetes={version}"], cwd=work)
    dscs = sorted(work.glob(f"kubernetes_{version.split(':')[-1]}.dsc"))
    if not dscs:
        raise LabError(f"apt-get source left no kubernetes_{version}.dsc in {work}")
    say("unpacking the source")
    run(["dpkg-source", "--no-check", "-x", str(dscs[0]), str(tree)], capture=True)
    _patch_reflect2(tree)
    stamp.write_text(version + "\n")
    return tree


def _patch_reflect2(tree):
    vendored = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    if not REFLECT2_DEBIAN.is_dir():
        raise LabError(f"{REFLECT2_DEBIAN} is missing: apt-get install golang-github-modern-go-reflect2-dev")
    if not vendored.is_dir():
        raise LabError(f"the source has no vendored reflect2 at {vendored}: unexpected layout")
    say("replacing vendored modern-go/reflect2 v1.0.1 with Debian's 1.0.2 (apiserver SIGSEGV fix)")
    for old in vendored.glob("*.go"):
        old.unlink()
    for new in REFLECT2_DEBIAN.iterdir():
        if new.suffix in (".go", ".s") and not new.name.endswith("_test.go"):
            shutil.copy2(new, vendored / new.name)


def _make_env(tree):
    # Like debian/rules: the archive carries its version (v1.20.2) itself.
    env = dict(os.environ)
    env.update({"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOPATH": str(tree / ".go")})
    link = tree / ".go" / "src" / "k8s.io" / "kubernetes"
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("../../..")
    return env


def _run_logged(argv, cwd, env, log, label):
    """Run a long step with its output in `log`, printing a heartbeat meanwhile."""
    start = time.monotonic()
    with open(log, "a") as fh:
        fh.write(f"\n### {label}: {' '.join(argv)}\n")
        fh.flush()
        # At the machine's normal priority: on a fresh machine both labs of the
        # test command wait for this build while lint, sanity and unit run.
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        next_beat = 30
        while proc.poll() is None:
            time.sleep(1)
            elapsed = time.monotonic() - start
            if elapsed >= next_beat:
                say(f"  {label}: still building ({elapsed:.0f}s, log {log})")
                next_beat += 30
    if proc.returncode != 0:
        tail = "".join(open(log, errors="replace").readlines()[-30:])
        raise LabError(f"{label} failed (rc={proc.returncode}); last lines of {log}:\n{tail}")
    return time.monotonic() - start


def _unpack_packaged(name, version, dest):
    """bin/<name> from Debian's binary package of the same source version.

    Unpacked, not installed: a machine's own kubectl (another package owning
    /usr/bin/kubectl, often a much newer one) stays as it is."""
    path, package = PACKAGED[name]
    work = CACHE / "src" / f"{package}-{version}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    say(f"{name}: unpacking Debian's {package} {version} (the same source, not built)")
    res = run(["apt-get", *APT_LOCK, "download", "-qq", f"{package}={version}"], cwd=work,
              check=False, capture=True)
    debs = sorted(work.glob(f"{package}_*.deb"))
    if res.returncode != 0 or not debs:
        raise LabError(f"apt-get download {package}={version} failed: {res.stderr.strip() or res.stdout.strip()}"
                       " (the lab's kubectl comes from that package; is bookworm's main in apt's sources?)")
    run(["dpkg-deb", "-x", str(debs[0]), str(work / "root")])
    unpacked = work / "root" / path.relative_to("/")
    if not unpacked.is_file():
        raise LabError(f"{debs[0].name} holds no {path}: unexpected package layout")
    shutil.copy2(unpacked, dest.with_name(dest.name + ".tmp"))
    os.replace(dest.with_name(dest.name + ".tmp"), dest)
    shutil.rmtree(work)


def _build_pause(tree, dest):
    src = tree / "build" / "pause" / "linux" / "pause.c"
    if not src.is_file():
        src = tree / "build" / "pause" / "pause.c"
    if not src.is_file():
        raise LabError(f"no pause.c in {tree}/build/pause: unexpected source layout")
    run(["gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.4-smshare", "-o", str(dest), str(src)])
    run(["strip", str(dest)], check=False)


def build(targets=None, version=None):
    """Make sure every binary in `targets` is in the cache; build what is missing."""
    targets = list(targets or CONTROL_PLANE)
    version = version or source_version()
    bins = bin_dir(version)
    if not missing(version, targets):
        return bins
    CACHE.mkdir(parents=True, exist_ok=True)
    lock_path = CACHE / f"kubernetes-{version}.lock"
    with open(lock_path, "w") as lock:
        waiting = False
        while True:
            if not missing(version, targets):   # another build made what we need
                return bins
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    say(f"another build holds {lock_path}; waiting for {', '.join(missing(version, targets))}")
                    waiting = True
                time.sleep(1)
        todo = missing(version, targets)
        bins.mkdir(parents=True, exist_ok=True)
        for name in [t for t in todo if t in PACKAGED]:
            _unpack_packaged(name, version, bins / name)
        todo = [t for t in todo if t not in PACKAGED]
        if not todo:
            return bins
        say(f"building {', '.join(todo)} from Debian's kubernetes {version} "
            "(cold: about 12 min on 2 cores, cached afterwards in {})".format(bins))
        tree = _source_tree(version)
        log = cache_dir(version) / "build.log"
        env = _make_env(tree)
        for i, name in enumerate(todo, 1):
            say(f"[{i}/{len(todo)}] {name}")
            start = time.monotonic()
            if name == "pause":
                _build_pause(tree, bins / "pause.tmp")
                os.replace(bins / "pause.tmp", bins / "pause")
            else:
                _run_logged(["make", f"WHAT=cmd/{name}"], tree, env, log, name)
                built = tree / "_output" / "local" / "bin" / "linux" / "amd64" / name
                if not built.is_file():
                    built = tree / "_output" / "bin" / name
                shutil.copy2(built, bins / f"{name}.tmp")
                os.replace(bins / f"{name}.tmp", bins / name)
            say(f"[{i}/{len(todo)}] {name} done in {time.monotonic() - start:.0f}s")
    return bins


def start_background(targets, log_path):
    """Start `labctl build` detached; returns the Popen (or None when nothing is missing)."""
    version = source_version()
    if not missing(version, targets):
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "a")
    offset = fh.tell()
    labctl = Path(__file__).resolve().parents[1] / "labctl"
    builder = subprocess.Popen([sys.executable, str(labctl), "build", *targets],
                               stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    builder.log_offset = offset
    return builder


def follow(proc, log_path):
    """Wait for a background build, echoing its progress lines."""
    done = threading.Event()

    def tail():
        with open(log_path, errors="replace") as fh:
            fh.seek(getattr(proc, "log_offset", 0))
            while not done.is_set():
                line = fh.readline()
                if line:
                    sys.stdout.write("  build| " + line)
                    sys.stdout.flush()
                else:
                    time.sleep(0.5)
            for line in fh:
                sys.stdout.write("  build| " + line)
    thread = threading.Thread(target=tail, daemon=True)
    thread.start()
    rc = proc.wait()
    done.set()
    thread.join(timeout=2)
    if rc != 0:
        raise LabError(f"the Kubernetes build failed (rc={rc}); see {log_path}")

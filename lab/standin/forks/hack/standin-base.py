#!/usr/bin/env python3
# Stand-in (lab only): the base root filesystem of the runnable stand-in images,
# made from this build host's Debian Python 3.11 (no registry, no Docker): the
# interpreter, the standard-library modules the stand-in programs import (and
# what those import: the closure, compiled, without sources), the extension
# modules and shared libraries they load, a few shell tools (sh, test, cat, env,
# sleep) and /etc/passwd. Small on purpose: every image build copies it. The
# tar is reproducible (sorted, mtime 0, root-owned) and cached by its inputs, so
# every image built from it shares one identical base layer.
#
#   standin-base.py OUT-DIR      prints the path of OUT-DIR/standin-base-<key>.tar
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
TOOLS = ["sh", "test", "cat", "env", "sleep"]
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/tmp:/bin/sh\n"
GROUP = b"root:x:0:\nnonroot:x:65532:\n"
# What the stand-in programs (hack/standin/) import, lazily included; Python's
# start-up (site, encodings: every codec, the socket module looks up "idna") comes too.
MODULES = ["site", "runpy", "encodings", "datetime", "hashlib", "http.server", "http.client", "json", "os",
           "re", "shutil", "signal", "socket", "selectors", "ssl", "subprocess", "sys", "threading", "time",
           "tomllib", "urllib.error", "urllib.parse", "urllib.request", "base64", "argparse", "tempfile",
           "csv", "uuid"]
# Run by the image's own interpreter: import MODULES, then compile every standard-library
# module now loaded (and every codec) into DEST as sourceless .pyc; print the .so files.
CLOSURE = r"""
import importlib, os, pkgutil, py_compile, sys
CJK = tuple("encodings." + n for n in ("mbcs", "oem", "big5", "cp932", "cp949", "cp950", "euc_", "gb", "hz",
                                       "iso2022_", "johab", "shift_jis"))
stdlib, dest, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
for name in names:
    importlib.import_module(name)
import encodings
for info in pkgutil.iter_modules(encodings.__path__, "encodings."):
    # Not the Windows codecs, nor the CJK ones (their tables are most of the size).
    if not info.name.startswith(CJK):
        importlib.import_module(info.name)
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    if not path.startswith(stdlib + "/"):
        continue
    rel = os.path.relpath(path, stdlib)
    if path.endswith(".py"):
        py_compile.compile(path, cfile=os.path.join(dest, rel[:-3] + ".pyc"), dfile=path, doraise=True)
    else:
        print(rel)
"""


def libraries(binaries):
    """Shared libraries (resolved paths) the binaries load, with the paths they are found at."""
    found = {}
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            words = line.split()
            path = words[2] if len(words) > 2 and words[1] == "=>" else words[0]
            if path.startswith("/"):
                found[path] = Path(path).resolve()
    return found


def cache_key():
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in [PYTHON, STDLIB, STDLIB / "lib-dynload"] + [Path(f"/usr/bin/{t}") for t in TOOLS]:
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def add(tar, name, data=None, mode=0o755, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.mode, info.type = 0, 0, 0, mode, kind
    if kind == tarfile.SYMTYPE:
        info.linkname = link
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def stdlib_closure(work):
    """{path in the image: file}: the compiled closure of MODULES and its extension modules."""
    out = subprocess.run([str(PYTHON), "-I", "-c", CLOSURE, str(STDLIB), str(work), ",".join(MODULES)],
                         capture_output=True, text=True, check=True).stdout
    files = {f"usr/lib/python3.11/{p.relative_to(work)}": p for p in sorted(work.rglob("*.pyc"))}
    # Python finds its prefix by this landmark.
    files["usr/lib/python3.11/os.py"] = STDLIB / "os.py"
    for rel in out.split():
        files[f"usr/lib/python3.11/{rel}"] = STDLIB / rel
    return files


def build(dest):
    tools = [Path(os.path.realpath(f"/bin/{t}")) if Path(f"/bin/{t}").exists() else Path(f"/usr/bin/{t}")
             for t in TOOLS]
    files = {"usr/bin/python3.11": PYTHON}
    for tool, real in zip(TOOLS, tools):
        files[f"usr/bin/{tool}"] = real
    work = Path(tempfile.mkdtemp(prefix="standin-base-"))
    try:
        files.update(stdlib_closure(work))
        write_tar(dest, files, tools)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_tar(dest, files, tools):
    so_files = [p for p in files.values() if p.suffix == ".so"]
    for wanted, real in libraries([PYTHON, *tools, *so_files]).items():
        files[wanted.lstrip("/")] = real
    entries = {}   # name -> (kind, payload)
    for name, real in files.items():
        entries[name] = ("file", real)
    entries["usr/bin/python3"] = ("link", "python3.11")
    entries["bin"] = ("link", "usr/bin")
    entries["lib"] = ("link", "usr/lib")
    entries["lib64"] = ("link", "usr/lib64")
    entries["etc/passwd"] = ("data", PASSWD)
    entries["etc/group"] = ("data", GROUP)
    for name, real in list(entries.items()):
        if real[0] == "file" and name.startswith(("lib/", "lib64/", "bin/")):
            entries.pop(name)
            entries["usr/" + name] = real
    dirs = {str(parent) for name in entries for parent in Path(name).parents} - {"."}
    dirs -= {name for name, (kind, _payload) in entries.items() if kind == "link"}
    tmp = dest.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(dirs | {"tmp"}):
            add(tar, name, mode=0o1777 if name == "tmp" else 0o755, kind=tarfile.DIRTYPE)
        for name, (kind, payload) in sorted(entries.items()):
            if kind == "link":
                add(tar, name, kind=tarfile.SYMTYPE, link=payload, mode=0o777)
            elif kind == "data":
                add(tar, name, data=payload, mode=0o644)
            else:
                data = payload.read_bytes()
                add(tar, name, data=data, mode=payload.stat().st_mode & 0o777)
    tmp.replace(dest)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: standin-base.py OUT-DIR")
    if not PYTHON.is_file():
        sys.exit(f"standin-base.py: {PYTHON} is missing: the stand-in images need Debian's python3.11")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"standin-base-{cache_key()}.tar"
    if not dest.is_file():
        build(dest)
    print(dest)


if __name__ == "__main__":
    main()

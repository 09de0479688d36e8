"""The lab's build host: stand-in fork repositories and a stand-in docker CLI
(lab/standin/forks, lab/standin/docker).

`make-forks.sh OUT-DIR` creates bare git repositories whose pinned commits are
reachable only through their pull-request refs, and OUT-DIR/forks.json with
url, pr_ref and commit of each; the lab inventory points the smshare_* fork
knobs at them. The pinned commits hold what make-forks.sh copies in (Makefiles,
charts, stand-in controllers): when any of it changes, `up` makes the forks
again, so the pinned commits always carry the current stand-ins. The stand-in
docker answers the role's buildx and binfmt calls (`labctl env` puts .lab/bin
first on PATH); its state is .lab/forks/docker.
"""
import hashlib
import json
import os

from .paths import LAB_DIR, STATE
from .util import run, say

SCRIPT = LAB_DIR / "standin" / "forks" / "make-forks.sh"
DOCKER = LAB_DIR / "standin" / "docker" / "docker"
OUT = STATE / "forks"
LAB_BIN = STATE / "bin"
# What make-forks.sh copies into the forks' pinned commits.
SOURCES = [LAB_DIR / "standin" / "forks", LAB_DIR / "standin" / "controllers",
           LAB_DIR / "standin" / "bin"]
STAMP = OUT / "sources.sha256"


def sources_digest():
    """One digest of every file (path, mode, content) make-forks.sh copies."""
    digest = hashlib.sha256()
    for source in SOURCES:
        if not source.is_dir():
            continue
        for path in sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(f"{path.relative_to(LAB_DIR)}\0{path.stat().st_mode & 0o777:o}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _link_docker():
    LAB_BIN.mkdir(parents=True, exist_ok=True)
    link = LAB_BIN / "docker"
    if link.is_symlink() and os.readlink(link) == str(DOCKER):
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(DOCKER)


def up():
    """{kai_scheduler: {url, pr_ref, commit}, gpu_fractioning: {...}} or {} when absent."""
    if not SCRIPT.is_file():
        say(f"SKIP stand-in forks: {SCRIPT} is not there yet")
        return {}
    facts = OUT / "forks.json"
    wanted = sources_digest()
    if not facts.is_file() or not STAMP.is_file() or STAMP.read_text().strip() != wanted:
        run(["bash", str(SCRIPT), str(OUT)], capture=True)
        STAMP.write_text(wanted + "\n")
    _link_docker()
    return json.loads(facts.read_text())

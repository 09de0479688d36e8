"""The lab's build host: stand-in fork repositories and a stand-in docker CLI
(lab/standin/forks, lab/standin/docker; fork-images engineer's).

`make-forks.sh OUT-DIR` creates bare git repositories whose pinned commits are
reachable only through their pull-request refs, and OUT-DIR/forks.json with
url, pr_ref and commit of each; the lab inventory points the smshare_* fork
knobs at them. The stand-in docker answers the role's buildx and binfmt calls
(`labctl env` puts .lab/bin first on PATH); its state is .lab/forks/docker.
"""
import json
import os

from .paths import LAB_DIR, STATE
from .util import run, say

SCRIPT = LAB_DIR / "standin" / "forks" / "make-forks.sh"
DOCKER = LAB_DIR / "standin" / "docker" / "docker"
OUT = STATE / "forks"
LAB_BIN = STATE / "bin"


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
    if not facts.is_file():
        run(["bash", str(SCRIPT), str(OUT)], capture=True)
    _link_docker()
    return json.loads(facts.read_text())

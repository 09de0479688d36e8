"""Stand-in fork repositories for the lab's build host (lab/standin/forks, fork-images engineer's).

`make-forks.sh OUT-DIR` creates bare git repositories whose pinned commits are
reachable only through their pull-request refs, and OUT-DIR/forks.json with
url, pr_ref and commit of each; the lab inventory points the smshare_* fork
knobs at them.
"""
import json

from .paths import LAB_DIR, STATE
from .util import run, say

SCRIPT = LAB_DIR / "standin" / "forks" / "make-forks.sh"
OUT = STATE / "forks"


def up():
    """{kai_scheduler: {url, pr_ref, commit}, gpu_fractioning: {...}} or {} when absent."""
    if not SCRIPT.is_file():
        say(f"SKIP stand-in forks: {SCRIPT} is not there yet")
        return {}
    facts = OUT / "forks.json"
    if not facts.is_file():
        run(["bash", str(SCRIPT), str(OUT)], capture=True)
    return json.loads(facts.read_text())

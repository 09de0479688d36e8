"""The lab's registry, through lab/registry.sh (the fork-images engineer's script).

Interface: `lab/registry.sh up|down|status <state-dir>`; after `up` the script
leaves in <state-dir>: `address` (host:port), `ca.crt`, `username`, `password`.
"""
from .paths import LAB_DIR, REGISTRY_STATE
from .util import LabError, run, say

SCRIPT = LAB_DIR / "registry.sh"


def available():
    return SCRIPT.is_file()


def info():
    """Address, CA path and credentials as the script left them; {} when unknown."""
    files = {"address": "address", "username": "username", "password": "password"}
    found = {}
    for key, name in files.items():
        path = REGISTRY_STATE / name
        if path.is_file() and path.read_text().strip():
            found[key] = path.read_text().strip()
    if (REGISTRY_STATE / "ca.crt").is_file():
        found["ca"] = str(REGISTRY_STATE / "ca.crt")
        found["cert_dir"] = str(REGISTRY_STATE)
    return found


def up():
    if not available():
        say(f"SKIP registry: {SCRIPT} is not there yet (the fork-images engineer's script)")
        return {}
    REGISTRY_STATE.mkdir(parents=True, exist_ok=True)
    run(["bash", str(SCRIPT), "up", str(REGISTRY_STATE)], capture=True)
    found = info()
    missing = [k for k in ("address", "ca", "username", "password") if k not in found]
    if missing:
        raise LabError(f"{SCRIPT} up left no {', '.join(missing)} in {REGISTRY_STATE}")
    return found


def down():
    if available() and REGISTRY_STATE.is_dir():
        run(["bash", str(SCRIPT), "down", str(REGISTRY_STATE)], capture=True)


def status():
    """(healthy, detail); healthy None when the script is absent."""
    if not available():
        return None, "lab/registry.sh not there yet"
    if not (REGISTRY_STATE / "address").is_file():
        return False, "never started"
    res = run(["bash", str(SCRIPT), "status", str(REGISTRY_STATE)], check=False, capture=True)
    return res.returncode == 0, (res.stdout or res.stderr).strip()

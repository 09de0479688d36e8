"""Where the lab keeps its state, caches and sources, and the names and ports
of this lab instance.

Several labs can run on one machine (engineers sharing it, each in a clone of
their own): SMSHARE_LAB_INSTANCE (0-9 or auto; scripts/env.sh reads it from
a git-ignored `.lab-instance` file, else says auto; bare, it is 0) gives each its own ports (default + 100 x
instance), container and network names, node-tier folders and pod subnet.
Instance 0 keeps the plain names and the well-known ports. The number is
claimed machine-wide (instances.py): two labs never hold the same one, and
SMSHARE_LAB_INSTANCE=auto takes the first free one.
"""
import os
from pathlib import Path

from . import instances

ROOT = Path(__file__).resolve().parents[2]
LAB_DIR = ROOT / "lab"
STATE = Path(os.environ.get("SMSHARE_LAB_STATE", ROOT / ".lab"))
CACHE = Path(os.environ.get("SMSHARE_LAB_CACHE", "/var/cache/smshare-lab"))
INVENTORY = ROOT / "inventories" / "lab"


def _instance():
    raw = os.environ.get("SMSHARE_LAB_INSTANCE", "0").strip() or "0"
    if raw != "auto" and (not raw.isdigit() or not 0 <= int(raw) <= 9):
        raise SystemExit(f"labctl: SMSHARE_LAB_INSTANCE must be a number from 0 to 9 or auto, got {raw!r}")
    if os.environ.get("SMSHARE_LAB_NO_CLAIM") == "1":   # unit tests of the names only
        return 0 if raw == "auto" else int(raw)
    try:
        return instances.resolve(STATE, raw)
    except instances.Taken as exc:
        raise SystemExit(f"labctl: {exc}")


INSTANCE = _instance()
# "" for instance 0, else the number: smshare-lab-gpu-01 / smshare-lab3-gpu-01.
SUFFIX = str(INSTANCE) if INSTANCE else ""
NAME = f"smshare-lab{SUFFIX}"


def port(default):
    """This instance's port for a service whose instance-0 port is `default`."""
    return default + 100 * INSTANCE


PKI = STATE / "pki"
RUN = STATE / "run"          # PID files
LOGS = STATE / "logs"
KUBECONFIG = STATE / "kubeconfig"
VAULT_PASS = STATE / "vault-pass"
REGISTRY_STATE = STATE / "registry"

"""Where the lab keeps its state, caches and sources."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB_DIR = ROOT / "lab"
STATE = Path(os.environ.get("SMSHARE_LAB_STATE", ROOT / ".lab"))
CACHE = Path(os.environ.get("SMSHARE_LAB_CACHE", "/var/cache/smshare-lab"))
INVENTORY = ROOT / "inventories" / "lab"

PKI = STATE / "pki"
RUN = STATE / "run"          # PID files
LOGS = STATE / "logs"
KUBECONFIG = STATE / "kubeconfig"
VAULT_PASS = STATE / "vault-pass"
REGISTRY_STATE = STATE / "registry"

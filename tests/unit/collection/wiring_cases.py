# Apache-2.0
"""The inventories the wiring tests render (wiring_render.py, once per test
session): the three shipped ones, the lab's with a stand-in for the source
`labctl up` generates, a100 cut down to its required knobs, and a100 with
every wired role variable set in host_vars, and a100 naming optional knobs
whose values cannot be templated."""
import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = sorted("playbooks/" + p.name for p in (REPO / "playbooks").glob("*.yml") if p.name != "site.yml")
VARS = REPO / "playbooks" / "vars"
WIRING_FILES = [VARS / "wiring.yml"]
# Knobs the wiring reads without a default: every inventory sets them.
REQUIRED_KNOBS = [
    "smshare_driver_method", "smshare_driver_branch",
    "smshare_kai_scheduler_repo_url", "smshare_kai_scheduler_pr_ref", "smshare_kai_scheduler_commit",
    "smshare_gpu_fractioning_repo_url", "smshare_gpu_fractioning_pr_ref", "smshare_gpu_fractioning_commit",
    "smshare_registry", "smshare_image_manifest_path", "smshare_kubeconfig", "smshare_gpu_sharing_mode",
    "smshare_runtime_class", "smshare_cri_socket_path", "smshare_nri_socket_path", "smshare_containerd_config_path",
    "smshare_min_cuda_version", "smshare_min_containerd_version",
    "smshare_gpu_operator_chart_version", "smshare_gpu_operator_driver_version",
    "smshare_pilot_chart_ref", "smshare_pilot_chart_version",
]
# What lab/smshare_lab/inventory.py writes to .lab/inventory (its keys are
# checked against the writer's), with values of the shape it writes.
FAKE_LAB_VARS = {
    "smshare_lab_state_dir": "/var/tmp/smshare-lab-test",
    "smshare_lab_registry_address": "127.0.0.1:5000",
    "smshare_lab_registry_ca": "/var/tmp/smshare-lab-test/registry/ca.crt",
    "smshare_lab_forks": {
        "kai_scheduler": {"url": "file:///var/tmp/smshare-lab-test/forks/KAI-Scheduler.git",
                          "pr_ref": "pull/2368/head", "commit": "44d1d0a966465c69b1fd0d24b40b9a1ebb73699e"},
        "gpu_fractioning": {"url": "file:///var/tmp/smshare-lab-test/forks/gpu-fractioning.git",
                            "pr_ref": "pull/147/head", "commit": "af0544e4dbd1d8e03ca14fc1e06d6265fabed99b"}},
    "smshare_lab_standin_apt_url": "http://10.88.0.1:8090",
    "smshare_lab_node_tier": {
        "node": "smshare-lab-node", "host_root": "/var/tmp/smshare-lab-test/node/root",
        "cri_socket": "/var/tmp/smshare-lab-test/node/run/containerd.sock", "nri_socket": "/var/run/nri/nri.sock",
        "containerd_config": "/var/tmp/smshare-lab-test/node/containerd.toml",
        "runtime_log": "/var/tmp/smshare-lab-test/node/runtime.log", "gpus": 2, "gpu_product": "NVIDIA A100-SXM4-80GB",
        "gpu_sm_count": 108, "gpu_memory_mib": 81920, "gpu_uuids": ["GPU-0", "GPU-1"]},
    "smshare_lab_chart_repo_url": "http://127.0.0.1:8091",
}
FAKE_LAB_VAULT = {"vault_smshare_registry_username": "lab-user", "vault_smshare_registry_password": "lab-pass"}
SENTINEL = "inventory-"


def env():
    values = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                  SMSHARE_LAB_STATE=FAKE_LAB_VARS["smshare_lab_state_dir"])
    values.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    values.pop("ANSIBLE_INVENTORY", None)
    return values


def load(path):
    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def wiring():
    """{role variable: its wiring's text} over every wiring file."""
    found = {}
    for path in WIRING_FILES:
        found.update({k: v for k, v in load(path).items() if not k.startswith("_")})
    return found


def knobs_read_by(text):
    return set(re.findall(r"(?<![a-z0-9_])smshare_[a-z0-9_]+", str(text)))


def fake_lab_source(root):
    source = root / "lab-inventory"
    (source / "group_vars" / "smshare_lab").mkdir(parents=True)
    (source / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        smshare-lab-gpu-01:\n")
    (source / "group_vars" / "smshare_lab" / "lab.yml").write_text(yaml.safe_dump(FAKE_LAB_VARS))
    (source / "group_vars" / "smshare_lab" / "vault.yml").write_text(yaml.safe_dump(FAKE_LAB_VAULT))
    return source


def minimal_a100(root):
    inventory = root / "a100-required"
    shutil.copytree(REPO / "inventories" / "a100", inventory)
    knobs = load(inventory / "group_vars" / "all.yml")
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump({k: knobs[k] for k in REQUIRED_KNOBS}))
    return inventory


def overridden_a100(root):
    inventory = root / "a100-overridden"
    shutil.copytree(REPO / "inventories" / "a100", inventory)
    (inventory / "host_vars").mkdir()
    values = {name: SENTINEL + name for name in wiring()}
    for host in ("a100-hgx-01", "build-01", "localhost"):
        (inventory / "host_vars" / (host + ".yml")).write_text(yaml.safe_dump(values))
    return inventory


# Optional knobs the inventory names with a value that cannot be templated.
BROKEN_KNOBS = ["smshare_smoke_test_image", "smshare_cuda_repo_mirror_url", "smshare_helm_binary", "smshare_image_tag"]


def broken_a100(root):
    inventory = root / "a100-broken"
    shutil.copytree(REPO / "inventories" / "a100", inventory)
    with open(inventory / "group_vars" / "all.yml", "a", encoding="utf-8") as handle:
        handle.write("".join('%s: "{{ no_such_variable }}"\n' % knob for knob in BROKEN_KNOBS))
    return inventory


@functools.lru_cache(maxsize=None)
def rendered():
    """{case: [play, ...]} from wiring_render.py, for every case, once."""
    root = Path(tempfile.mkdtemp(prefix="smshare-wiring-"))
    atexit.register(shutil.rmtree, root, True)
    cases = {
        "a100": [str(REPO / "inventories" / "a100")],
        "airgap": [str(REPO / "inventories" / "airgap")],
        "lab": [str(REPO / "inventories" / "lab"), str(fake_lab_source(root))],
        "a100-required": [str(minimal_a100(root))],
        "a100-overridden": [str(overridden_a100(root))],
        "a100-broken": [str(broken_a100(root))],
    }
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("wiring_render.py")),
                           json.dumps({"playbooks": PLAYBOOKS, "wired": sorted(wiring()), "cases": cases})],
                          cwd=REPO, env=env(), capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def host_values(case, host):
    """Every role variable as the plays on this host see it (the first play that renders it)."""
    values = {}
    for play in rendered()[case]:
        for name, value in play["hosts"].get(host, {}).get("values", {}).items():
            values.setdefault(name, value)
    return values

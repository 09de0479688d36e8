# Apache-2.0
"""The lab overlay (lab/smshare_lab/overlay.py, lab/README.md "The lab overlay"),
rendered from made-up lab facts on localhost: it sets only the keys its table
and lab/README.md list, each one a knob the shipped inventories name or a role
variable inventories/lab already sets, so it cannot grow into a second lab
inventory; and a copy of a shipped inventory with it takes the overlay's values
and its own for the rest."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SHIPPED = ["a100", "airgap"]
FACTS = [
    {"address": "127.0.0.1:5443", "ca": "/var/tmp/lab-test/registry/certs/ca.crt"},
    "http://10.88.0.1:18615",
    {"kai_scheduler": {"url": "file:///var/tmp/lab-test/forks/KAI-Scheduler.git", "pr_ref": "pull/2368/head",
                       "commit": "1" * 40},
     "gpu_fractioning": {"url": "file:///var/tmp/lab-test/forks/gpu-fractioning.git", "pr_ref": "pull/147/head",
                         "commit": "2" * 40}},
    {"cri_socket": "/run/smshare-lab/containerd/containerd.sock", "nri_socket": "/var/run/nri/nri.sock",
     "containerd_config": "/var/lib/smshare-lab/containerd.toml", "host_root": "/var/lib/smshare-lab/host"},
    "http://127.0.0.1:18680",
]
VAULT = ("# Generated\nvault_smshare_registry_username: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3131\n"
         "vault_smshare_registry_password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3232\n")
WRITE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from smshare_lab import overlay
facts = json.loads(sys.argv[2])
overlay.write(overlay.values(*facts), sys.argv[3], {"smshare-lab-gpu-01": "10.88.0.11", "smshare-lab-gpu-02": "10.88.0.12"},
              Path("/var/tmp/lab-test/ssh/id_ed25519"))
print(json.dumps({"keys": [key for key, _why in overlay.KEYS], "dir": str(overlay.DIR), "hosts": str(overlay.HOSTS)}))
"""


class Loader(yaml.SafeLoader):
    """Reads the overlay with its vaulted values left encrypted."""


Loader.add_constructor("!vault", lambda _loader, _node: "<vaulted>")


@pytest.fixture
def overlay(tmp_path):
    """The overlay labctl up would write for FACTS, in a state folder of its own."""
    env = dict(os.environ, SMSHARE_LAB_STATE=str(tmp_path / "state"), SMSHARE_LAB_INSTANCE="0",
               SMSHARE_LAB_NO_CLAIM="1")
    done = subprocess.run([sys.executable, "-c", WRITE, str(REPO / "lab"), json.dumps(FACTS), VAULT],
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def overlay_values(overlay):
    return yaml.load((Path(overlay["dir"]) / "group_vars" / "all.yml").read_text(), Loader=Loader)


def documented():
    """The keys lab/README.md's overlay table lists."""
    text = (REPO / "lab" / "README.md").read_text().split("## The lab overlay", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", text, re.M)


def shipped_knobs():
    """Every knob the shipped inventories set or show commented out."""
    names = set()
    for name in SHIPPED:
        text = (REPO / "inventories" / name / "group_vars" / "all.yml").read_text()
        names |= set(re.findall(r"^#? ?(smshare_[a-z0-9_]+):", text, re.M))
    return names


def role_options():
    names = set()
    for spec in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            names |= set(entry.get("options", {}))
    return names


def test_the_overlay_sets_only_its_documented_keys(overlay):
    written = list(overlay_values(overlay))
    assert sorted(written) == sorted(overlay["keys"]), "overlay.py writes a key its KEYS table does not list"
    assert sorted(documented()) == sorted(overlay["keys"]), "lab/README.md's table and overlay.py's KEYS differ"


def test_every_overlay_key_is_a_shipped_knob_or_the_labs_role_variable(overlay):
    """A knob: one the shipped inventories set or show commented out (so the wiring takes it to the
    roles). A role variable: a role's option that inventories/lab already sets, its plumbing."""
    lab = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    knobs, options = shipped_knobs(), role_options()
    for key in overlay_values(overlay):
        if key.startswith("smshare_"):
            assert key in knobs, f"{key}: no shipped inventory names this knob"
        else:
            assert key in options and key in lab, f"{key}: not a role variable inventories/lab sets"


def test_the_overlay_hosts_have_the_shipped_groups(overlay):
    hosts = yaml.safe_load(Path(overlay["hosts"]).read_text())
    for name in SHIPPED:
        shipped = yaml.safe_load((REPO / "inventories" / name / "hosts.yml").read_text())
        assert sorted(hosts["all"]["children"]) == sorted(shipped["all"]["children"]), name


@pytest.mark.parametrize("name", SHIPPED)
def test_a_copy_with_the_overlay_takes_the_overlays_values_and_its_own(tmp_path, overlay, name):
    """ansible-inventory on the copy (hosts.yml the lab's) then the overlay: the overlay's keys win
    over the copy's group_vars/all.yml, every other key is the copy's, inventory_dir is the copy's."""
    copy = tmp_path / name
    shutil.copytree(REPO / "inventories" / name, copy)
    shutil.copyfile(overlay["hosts"], copy / "hosts.yml")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    done = subprocess.run(["ansible-inventory", "-i", str(copy), "-i", overlay["dir"], "--host", "smshare-lab-gpu-01"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    host = json.loads(done.stdout)
    values = overlay_values(overlay)
    shipped = yaml.safe_load((copy / "group_vars" / "all.yml").read_text())
    for key, value in values.items():
        if value != "<vaulted>":
            assert host[key] == value, key
    for key, value in shipped.items():
        if key not in values:
            assert host[key] == value, key
    # The GPU nodes reached over SSH as in inventories/lab: its gpu_nodes vars, as they are.
    lab_gpu_nodes = yaml.safe_load((REPO / "inventories" / "lab" / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]
    assert lab_gpu_nodes["vars"]["ansible_connection"] == "ssh"
    for key, value in lab_gpu_nodes["vars"].items():
        assert host[key] == value, key
    assert host["ansible_host"] == "10.88.0.11" and host["ansible_ssh_private_key_file"] == "/var/tmp/lab-test/ssh/id_ed25519"
    # The hosts are the copy's: paths the copy derives from inventory_dir are the copy's (airgap's keyring).
    done = subprocess.run(["ansible", "localhost", "-i", str(copy), "-i", overlay["dir"], "-m", "ansible.builtin.debug",
                           "-a", "var=inventory_dir"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "inventory_dir: %s\n" % copy in done.stdout, done.stdout + done.stderr

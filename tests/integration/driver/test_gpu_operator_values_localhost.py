# Apache-2.0
"""gpu_operator_values as users give them, run by ansible on localhost: the role
refuses what helm would read as something other than meant, before the cluster
is read (its kubeconfig points at a port nothing listens on), and passes nested
values through to that first read."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAY = """
- name: The gpu_operator role alone
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: smshare.kai.gpu_operator
"""


def run(tmp_path, kubeconfig, *args):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY="")
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    argv = ["ansible-playbook", "-i", "localhost,", str(play), "-e",
            json.dumps({"gpu_operator_kubeconfig": str(kubeconfig), "gpu_operator_nodes": ["gpu-node-01"],
                        "ansible_python_interpreter": sys.executable})]
    return subprocess.run(argv + list(args), cwd=str(REPO), env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize("args, words", [
    pytest.param(["-e", "gpu_operator_values=toolkit.enabled=false"], "gpu_operator_values is str, not a mapping",
                 id="set-string-from-e"),
    pytest.param(["-e", '{"gpu_operator_values": "{\\"toolkit\\": {\\"enabled\\": false}}"}'],
                 "gpu_operator_values is str, not a mapping", id="json-text-in-a-string"),
    pytest.param(["-e", '{"gpu_operator_values": {"toolkit.enabled": false, "devicePlugin": {"enabled": true}}}'],
                 "has top-level keys with dots (toolkit.enabled)", id="set-path-as-key"),
    pytest.param(["-e", '{"gpu_operator_values": {"driver": {"version": "580.95.05"}}}'],
                 "sets driver.version, which the role sets", id="driver-version"),
    pytest.param(["-e", '{"gpu_operator_values": {"driver": {"enabled": false, "repository": "nvcr.io/x"}}}'],
                 "sets driver.enabled=false, driver.repository, which the role sets", id="driver-disabled-and-repository"),
])
@pytest.mark.parametrize("mode", [[], ["--check", "--diff"]], ids=["run", "check-diff"])
def test_values_helm_would_misread_are_refused_before_the_cluster(tmp_path, unreachable_kubeconfig, args, words, mode):
    done = run(tmp_path, unreachable_kubeconfig, *args, *mode)
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and words in out and "Nothing was changed" in out, done.stdout[-3000:]
    assert "Read the Kubernetes Nodes" not in out, "refused before the cluster is read"


@pytest.mark.parametrize("values", [
    pytest.param(None, id="default"),
    pytest.param({"toolkit": {"enabled": False}}, id="no-driver-key"),
    pytest.param({"toolkit": {"enabled": False},
                  "daemonsets": {"nodeSelector": {"nvidia.com/gpu.deploy.driver": "true"}},
                  "driver": {"enabled": True, "upgradePolicy": {"autoUpgrade": False}}}, id="nested-with-driver"),
])
def test_nested_values_and_label_keys_below_the_top_pass_to_the_cluster_read(tmp_path, unreachable_kubeconfig, values):
    given = [] if values is None else ["-e", json.dumps({"gpu_operator_values": values})]
    done = run(tmp_path, unreachable_kubeconfig, *given)
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and "Read the Kubernetes Nodes" in out, done.stdout[-3000:]
    assert "not a mapping" not in out and "which the role sets" not in out, done.stdout[-3000:]

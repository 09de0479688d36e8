# Apache-2.0
"""The action group smshare.kai.cluster: one module_defaults entry, as the
README shows it, gives workload_lint, fraction_smoke_test and rollout_lock their cluster
access, as kubernetes.core's groups give k8s_info its own (no cluster needed:
the context chosen is one the kubeconfig lacks, so each module names it)."""
import subprocess
import sys

import yaml

PLAY = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/kubernetes.core.k8s: &access {kubeconfig: "%(kubeconfig)s", context: elsewhere}
    group/kubernetes.core.helm: *access
    group/smshare.kai.cluster: *access
  tasks:
    - name: lint a namespace
      smshare.kai.workload_lint:
        namespaces: [default]
      register: lint
      ignore_errors: true
    - name: smoke-test a node
      smshare.kai.fraction_smoke_test:
        node: gpu-node-1
      register: smoke
      ignore_errors: true
    - name: take a rollout lock
      smshare.kai.rollout_lock:
        holder: test
      register: lock
      ignore_errors: true
    - name: read pods
      kubernetes.core.k8s_info:
        kind: Pod
      register: pods
      ignore_errors: true
    - name: what each module said
      ansible.builtin.copy:
        dest: "%(out)s"
        content: "{{ {'lint': lint.msg, 'smoke': smoke.msg, 'lock': lock.msg, 'pods': pods.msg} | to_json }}"
"""


def test_one_module_defaults_entry_reaches_every_cluster_module(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}]}))
    out = tmp_path / "said.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAY % {"kubeconfig": kubeconfig, "out": out})
    run = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                          "-e", "ansible_python_interpreter=" + sys.executable, str(play)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    said = yaml.safe_load(out.read_text())
    for module in ("lint", "smoke", "lock"):
        assert said[module].startswith("cannot load kubeconfig %s (context elsewhere)" % kubeconfig), said
    assert "elsewhere" in said["pods"], said

"""lab/labctl itself: status, idempotent up, what listens where, env output, bad input."""
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lab_helpers import describe

pytestmark = pytest.mark.lab
LABCTL = Path(__file__).resolve().parents[3] / "lab" / "labctl"
sys.path.insert(0, str(LABCTL.parent))


def pids(lab):
    return {p.stem: p.read_text().split()[0] for p in (lab.state_dir / "run").glob("*.pid")}


def test_status_lists_every_component_up(lab):
    proc = lab.labctl("status")
    assert proc.returncode == 0, describe(proc)
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        line = next(l for l in proc.stdout.splitlines() if l.startswith(name + " "))
        assert " up " in line, proc.stdout
    for node in lab.gpu_nodes:
        assert f"gpu node {node}" in proc.stdout


def test_second_up_changes_nothing(lab):
    before = pids(lab)
    proc = lab.labctl("up", *(["--nodes"] if lab.node_tier else []))
    assert proc.returncode == 0, describe(proc)
    assert "everything was already running, nothing to do" in proc.stdout, proc.stdout
    assert pids(lab) == before


def test_apiserver_serves_v1_20_with_rbac(lab):
    version = json.loads(lab.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.20.2"
    assert lab.kubectl("auth", "can-i", "create", "pods", "--as", "smshare-lab-nobody",
                       check=False).stdout.strip() == "no"


def test_listens_on_loopback_only_but_the_apiserver(lab):
    """Only the apiserver listens beyond loopback (containers and pods dial it),
    and it answers nothing to a client without a certificate."""
    lab_pids = set(pids(lab).values())
    proc = subprocess.run(["ss", "-ltnpH"], text=True, capture_output=True, check=True)
    ours = [line for line in proc.stdout.splitlines() if any(f"pid={p}," in line for p in lab_pids)]
    assert ours, proc.stdout
    from smshare_lab import node_tier   # kubelet listens on the node tier's unrouted dummy address
    apiserver_pid = pids(lab)["kube-apiserver"]
    for line in ours:
        local = line.split()[3]
        if f"pid={apiserver_pid}," in line:
            assert local.endswith(":" + lab.apiserver.rsplit(":", 1)[1]), line
            continue
        assert local.startswith(("127.0.0.1:", "[::1]:", f"{node_tier.NODE_IP}:")), \
            f"listens beyond loopback: {line}"
    facts = json.loads((lab.state_dir / "lab.json").read_text())
    url = facts["apiserver_for_containers"] + "/api/v1/secrets"
    ctx = ssl.create_default_context(cafile=str(lab.state_dir / "pki" / "ca.crt"))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, context=ctx, timeout=5)
    assert refused.value.code in (401, 403)


def test_env_exports_kubeconfig_and_vault_password_file(lab):
    proc = lab.labctl("env")
    assert proc.returncode == 0, describe(proc)
    assert f"export KUBECONFIG={lab.kubeconfig}" in proc.stdout
    assert f"export ANSIBLE_VAULT_PASSWORD_FILE={lab.vault_password_file}" in proc.stdout
    assert (lab.vault_password_file.stat().st_mode & 0o077) == 0


@pytest.mark.parametrize("argv, message", [
    (["up", "--gpu-nodes", "-1"], "--gpu-nodes must be 0 or more"),
    (["build", "kube-proxyy"], "unknown build target(s): kube-proxyy"),
    (["sideways"], "invalid choice"),
])
def test_bad_input_is_refused_before_anything_changes(lab, argv, message):
    before = pids(lab)
    proc = subprocess.run([sys.executable, str(LABCTL), *argv], text=True, capture_output=True, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert pids(lab) == before


def test_status_notices_a_dead_component_and_up_restarts_only_it(lab):
    pid = int(pids(lab)["kube-scheduler"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2:3]:
        assert time.monotonic() < deadline, "kube-scheduler did not die"
        time.sleep(0.1)
    status = lab.labctl("status")
    assert status.returncode == 1, describe(status)
    assert re.search(r"^kube-scheduler\s+DOWN", status.stdout, re.M), status.stdout
    others = {k: v for k, v in pids(lab).items() if k != "kube-scheduler"}
    up = lab.labctl("up", *(["--nodes"] if lab.node_tier else []))
    assert up.returncode == 0, describe(up)
    assert "started: kube-scheduler\n" in up.stdout, up.stdout
    assert {k: v for k, v in pids(lab).items() if k != "kube-scheduler"} == others
    assert lab.labctl("status").returncode == 0

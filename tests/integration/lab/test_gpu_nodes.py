"""The GPU-node containers: reachable from Ansible through inventories/lab, systemd as PID 1."""
import pytest

from lab_helpers import describe, recap

pytestmark = pytest.mark.lab
PLAY = "tests/integration/lab/playbooks/gpu_nodes_probe.yml"


def test_nodes_answer_through_the_lab_inventory(lab):
    if not lab.gpu_nodes:
        pytest.fail("the lab started no GPU nodes (see labctl up's output)")
    proc = lab.playbook(PLAY)
    assert proc.returncode == 0, describe(proc)
    for node in lab.gpu_nodes:
        assert recap(proc.stdout, node)["failed"] == 0
        assert f"PID1={node}=systemd" in proc.stdout, describe(proc)
    if lab.standin_apt_url:
        assert proc.stdout.count("STANDIN_APT=200") == len(lab.gpu_nodes), describe(proc)

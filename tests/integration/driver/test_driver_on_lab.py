# Apache-2.0
"""The driver play on the lab's GPU nodes (HGX stand-ins provisioned like real
nodes), then every sub-step tag run alone on a converged node: each one works
without the others and changes nothing."""
import re

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.second_lab, pytest.mark.slow]

TAGS = ["nvidia_driver_preferences", "nvidia_driver_repo", "nvidia_driver_pin", "nvidia_driver_kernel", "nvidia_driver_install",
        "nvidia_driver_reboot", "nvidia_driver_verify", "nvidia_driver_services"]


def recap(output, host):
    for line in output.splitlines():
        if line.startswith(host + " ") and ":" in line:
            return dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line))
    raise AssertionError("no PLAY RECAP line for %s in:\n%s" % (host, output[-3000:]))


def test_each_sub_step_runs_alone_on_a_converged_node(lab):
    if not lab.gpu_nodes:
        pytest.fail("the lab started no GPU nodes (see labctl up's output)")
    node = lab.gpu_nodes[0]
    converge = lab.playbook("playbooks/driver.yml", "--limit", node)
    assert converge.returncode == 0, converge.stdout[-4000:]
    for tag in TAGS:
        run = lab.playbook("playbooks/driver.yml", "--limit", node, "--tags", tag)
        counts = recap(run.stdout, node)
        assert run.returncode == 0 and counts["failed"] == 0, "%s:\n%s" % (tag, run.stdout[-4000:])
        assert counts["changed"] == 0, "%s changed something:\n%s" % (tag, run.stdout[-4000:])
    # A sub-step tag runs that step's own tasks, not just the preflight.
    services = lab.playbook("playbooks/driver.yml", "--limit", node, "--tags", "nvidia_driver_services", "-v")
    read = services.stdout.split("Read the loaded driver, the NVSwitches and the services]")
    assert len(read) == 2 and read[1].lstrip("* \n").startswith("ok: [%s]" % node), services.stdout[-3000:]
    assert "Enable and start Fabric Manager]" in services.stdout
    assert "Install the driver" not in services.stdout

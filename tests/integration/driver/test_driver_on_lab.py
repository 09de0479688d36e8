# Apache-2.0
"""The driver play on the lab's GPU nodes (HGX stand-ins provisioned like real
nodes), then every sub-step tag run alone on a converged node: each one works
without the others and changes nothing."""
import json
import re

import pytest

from lab_helpers import on_node

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


def loaded_driver(node):
    return on_node(node, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout.split("\n")[0].strip()


def boot_of(node):
    return on_node(node, "awk", "{ print $22 }", "/proc/1/stat").stdout.strip()


def test_a_driver_installed_but_not_loaded_is_rebooted_into_by_the_next_run(lab):
    """A run stopped between its install and its reboot (killed, Ctrl-C, the node lost) leaves
    the new driver installed and the old module loaded. Here a run told not to reboot leaves
    that state; the next run has nothing to install and reboots into it, and the one after
    changes nothing."""
    node = lab.gpu_nodes[0]
    before = loaded_driver(node)
    assert before.split(".")[0] in ("580", "615"), before
    other = "580" if before.startswith("615.") else "615"
    branch = ["-e", json.dumps({"smshare_driver_branch": int(other)})]
    boot = boot_of(node)
    stopped = lab.playbook("playbooks/driver.yml", "--limit", node, *branch, "-e", "nvidia_driver_reboot=false")
    assert stopped.returncode != 0, stopped.stdout[-4000:]
    said = " ".join(stopped.stdout.split())
    assert "Driver/library version mismatch" in said and "nvidia_driver_reboot is false" in said, said[-3000:]
    assert boot_of(node) == boot, "told not to reboot"

    resumed = lab.playbook("playbooks/driver.yml", "--limit", node, *branch)
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    said = " ".join(resumed.stdout.split())
    assert "an earlier run installed it and stopped before its reboot. Rebooting into it." in said, said[-3000:]
    assert boot_of(node) != boot and loaded_driver(node).startswith(other + "."), loaded_driver(node)

    again = lab.playbook("playbooks/driver.yml", "--limit", node, *branch)
    assert again.returncode == 0 and recap(again.stdout, node)["changed"] == 0, again.stdout[-4000:]

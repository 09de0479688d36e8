# Apache-2.0
"""The driver play on the lab's GPU nodes (HGX stand-ins provisioned like real
nodes), then every sub-step tag run alone on a converged node: each one works
without the others and changes nothing; a converged node runs only the role's
read and plan, and each kind of drift is planned and corrected."""
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
    # Converged: one read of the node and its plan; no step's own task runs.
    again = lab.playbook("playbooks/driver.yml", "--limit", node)
    said = " ".join(again.stdout.split())
    assert "Plan: nothing to do: driver 615." in said and "of branch 615 loaded, every step converged" in said, \
        again.stdout[-4000:]
    for task in STEP_TASKS:
        assert task not in again.stdout, "%s ran on a converged node:\n%s" % (task, again.stdout[-4000:])
    # A sub-step tag runs that step's own tasks where the node drifted, and no other step's.
    assert on_node(node, "systemctl", "stop", "nvidia-fabricmanager").returncode == 0
    services = lab.playbook("playbooks/driver.yml", "--limit", node, "--tags", "nvidia_driver_services")
    said = " ".join(services.stdout.split())
    assert services.returncode == 0 and "Plan: verify (nvidia-fabricmanager is enabled and inactive)" in said, \
        services.stdout[-4000:]
    assert "Enable and start Fabric Manager]" in services.stdout and "Install the driver" not in services.stdout
    assert on_node(node, "systemctl", "is-active", "nvidia-fabricmanager").stdout.strip() == "active"


# Step tasks that a converged node's run must not reach (one of each step file).
STEP_TASKS = ["Find apt preferences that give NVIDIA's repository a negative priority",
              "Read what is installed (cuda-keyring, python3-debian)",
              "Read the installed pins and what apt offers", "Blacklist nouveau",
              "Read what apt offers of the driver, Fabric Manager and NSCQ",
              "Read the loaded driver, the NVSwitches and the services"]


def fingerprint(node):
    """What the drift cases change: packages, the role's files, the services."""
    return on_node(node, "sh", "-c", "dpkg-query -W -f '${Package} ${Version} ${Status}\\n';"
                   " cat /etc/apt/sources.list.d/* /etc/modprobe.d/blacklist-nouveau.conf 2>&1;"
                   " systemctl is-active nvidia-fabricmanager nvidia-persistenced").stdout


@pytest.mark.parametrize("drift, plan", [
    ("apt-get purge -y -q nvidia-driver-pinning-615 >/dev/null",
     "pin (nvidia-driver-pinning-615 is not installed)"),
    ("sed -i 's|^URIs: .*|URIs: http://mirror.invalid/debian12/x86_64/|' /etc/apt/sources.list.d/cuda-debian12-x86-64.sources",
     "repo (the sources entry /etc/apt/sources.list.d/cuda-debian12-x86-64.sources differs (URIs))"),
    ("rm /etc/modprobe.d/blacklist-nouveau.conf",
     "kernel (the nouveau blacklist: /etc/modprobe.d/blacklist-nouveau.conf is missing)"),
    ("systemctl stop nvidia-fabricmanager", "verify (nvidia-fabricmanager is enabled and inactive)"),
    # What an apt killed between unpacking and configuring leaves: the package unpacked, not configured.
    ("cd /tmp && apt-get download -q nvidia-utils-615 >/dev/null && dpkg --unpack nvidia-utils-615_*.deb"
     " >/dev/null && rm nvidia-utils-615_*.deb",
     "repair (dpkg left nvidia-utils-615 615.71.09-"),
], ids=["a removed pin", "a changed repository entry", "a missing blacklist", "a stopped Fabric Manager",
        "a package left unpacked"])
def test_drift_is_planned_and_corrected(lab, drift, plan):
    """Each kind of drift on a converged node: the plan names it, --check acts on
    nothing, the run corrects it, and the run after that has nothing to do."""
    node = lab.gpu_nodes[0]
    first = lab.playbook("playbooks/driver.yml", "--limit", node)
    assert first.returncode == 0, first.stdout[-4000:]
    done = on_node(node, "sh", "-c", drift)
    assert done.returncode == 0, done.stdout + done.stderr
    drifted = fingerprint(node)
    checked = lab.playbook("playbooks/driver.yml", "--limit", node, "--check")
    assert checked.returncode == 0 and plan in " ".join(checked.stdout.split()), checked.stdout[-4000:]
    assert fingerprint(node) == drifted, "--check changed the node"
    fixed = lab.playbook("playbooks/driver.yml", "--limit", node)
    assert fixed.returncode == 0 and plan in " ".join(fixed.stdout.split()), fixed.stdout[-4000:]
    assert recap(fixed.stdout, node)["changed"] > 0, fixed.stdout[-4000:]
    again = lab.playbook("playbooks/driver.yml", "--limit", node)
    assert again.returncode == 0 and recap(again.stdout, node)["changed"] == 0, again.stdout[-4000:]
    assert "Plan: nothing to do" in again.stdout, again.stdout[-4000:]


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

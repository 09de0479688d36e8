"""`labctl down` leaves nothing of the lab behind: processes, mounts, cgroups,
iptables chains, bridge, containers. Runs last (marker lab_teardown)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab_helpers import describe

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.lab_teardown]
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))


POD = """
apiVersion: v1
kind: Pod
metadata: {{name: lab-down-probe, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - {{name: pause, image: "{image}", imagePullPolicy: Never}}
"""


def alive(pid):
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cni_netns():
    return {n for n in os.listdir("/run/netns") if n.startswith("cni-")} if os.path.isdir("/run/netns") else set()


def our_netns(node_tier, containerd_pid):
    """The pod network namespaces of this lab: an address in its pod subnet, seen from its
    containerd's mount namespace (where the files under /run/netns are mounted). Another
    lab's pods (the second stream runs beside this one) come and go meanwhile."""
    prefix = node_tier.POD_GATEWAY.rsplit(".", 1)[0] + "."
    return {name for name in cni_netns()
            if f" {prefix}" in subprocess.run(["nsenter", "-t", str(containerd_pid), "-m", "ip", "-n", name, "-o", "-4",
                                              "addr", "show"], text=True, capture_output=True, check=False).stdout}


def other_sessions(lab):
    """Live pytest sessions other than ours holding a lease on the lab (see tests/conftest.py)."""
    leases = (lab.state_dir / "sessions").glob("*")
    return [int(p.name) for p in leases
            if p.name.isdigit() and int(p.name) != os.getpid() and Path(f"/proc/{p.name}").exists()]


def test_down_leaves_nothing_behind(lab):
    from smshare_lab import node_tier  # the lab's own list of what it creates

    if other_sessions(lab):
        if os.environ.get("CI"):
            pytest.fail("CI must prove down alone, but other sessions use the lab: %s" % other_sessions(lab))
        pytest.skip(f"other pytest sessions use the lab right now (pids {other_sessions(lab)}); "
                    "rerun when they are done")

    ours_running = set()
    if lab.node_tier:   # a running pod: shims, a network namespace, cgroups, veth on the bridge
        lab.kubectl("apply", "-f", "-", input_text=POD.format(image=node_tier.PAUSE_IMAGE))
        lab.kubectl("-n", "default", "wait", "--for=condition=Ready", "pod/lab-down-probe", "--timeout=120s")
        assert node_tier.leftovers(), "a running pod should leave traces before down"
        ours_running = our_netns(node_tier, (lab.state_dir / "run" / "containerd.pid").read_text().split()[0])
        assert ours_running, "the probe pod should have a network namespace in the lab's pod subnet"
    pids = [p.read_text().split()[0] for p in (lab.state_dir / "run").glob("*.pid")]
    assert len(pids) >= 4 + (2 if lab.node_tier else 0), pids
    proc = lab.labctl("down")
    assert proc.returncode == 0, describe(proc)

    assert not [p for p in pids if alive(p)]
    # Every namespace of the lab's live pods, older ones included, not only the probe's.
    assert not ours_running & cni_netns(), "labctl down left the lab's pod network namespaces"
    assert node_tier.leftovers() == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert f"{node_tier.LIB} " not in mounts and f"{node_tier.RUNDIR} " not in mounts
    assert f"{node_tier.LIB}/" not in mounts and f"{node_tier.RUNDIR}/" not in mounts
    links = subprocess.run(["ip", "-o", "link", "show"], text=True, capture_output=True, check=True).stdout
    assert node_tier.BRIDGE not in links
    # The kubelet is told to make no iptables chains (other instances share the tables).
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            rules = subprocess.run([tool, "-w", "-t", table, "-S"], text=True, capture_output=True, check=False).stdout
            assert "KUBE-" not in rules, f"{tool} -t {table}:\n{rules}"
    from smshare_lab import gpu_nodes
    ps = subprocess.run(["podman", "ps", "-a", "--filter", "label=io.smshare.lab=gpu-node",
                         "--filter", f"label={gpu_nodes.INSTANCE_LABEL}", "--format", "json"],
                        text=True, capture_output=True, check=True, env=lab.env)
    assert json.loads(ps.stdout or "[]") == []
    status = lab.labctl("status")
    assert status.returncode == 1, describe(status)
    assert not (lab.state_dir / "lab.json").exists()
    assert not (lab.state_dir / "overlay" / "group_vars" / "all.yml").exists()   # the lab overlay goes too
    assert not (lab.state_dir / "overlay-hosts.yml").exists()

"""The node tier: a Ready node, a real pod (image imported with ctr), logs and exec."""
import io
import json
import re
import subprocess
import sys
import tarfile

import pytest

from lab_helpers import describe

pytestmark = [pytest.mark.lab, pytest.mark.second_lab, pytest.mark.lab_nodes]
PLAY = "tests/integration/lab/playbooks/node_pod.yml"


def node_tier_of(lab):
    """The lab's node-tier socket and pod subnet, computed for its own instance in a
    fresh interpreter: this process may hold smshare_lab imported for another
    (test_labctl_units.py imports it as instance 0, without a claim)."""
    code = "from smshare_lab import node_tier as n; print(n.SOCKET); print(n.POD_SUBNET)"
    env = dict(lab.env, SMSHARE_LAB_NO_CLAIM="1", SMSHARE_LAB_STATE=str(lab.state_dir))
    out = subprocess.run([sys.executable, "-c", code], cwd=lab.root / "lab", env=env, text=True,
                         capture_output=True, check=True).stdout.split()
    return {"socket": out[0], "pod_subnet": out[1]}


def test_node_is_ready(lab):
    assert lab.kube_nodes, "the node tier did not start"
    node = json.loads(lab.kubectl("get", "node", lab.kube_nodes[0], "-o", "json").stdout)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"


def test_load_image_puts_a_podman_image_into_the_node_runtime(lab, tmp_path):
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        data = b"lab\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    ref = "localhost/smshare-lab-test/load-image:1"
    subprocess.run(["podman", "import", str(rootfs), ref], env=lab.env, check=True, capture_output=True)
    try:
        lab.load_image(ref)
        images = subprocess.run(["ctr", "--address", node_tier_of(lab)["socket"], "-n", "k8s.io", "images", "ls", "-q"],
                                text=True, capture_output=True, check=True).stdout.split()
        assert ref in images
    finally:
        subprocess.run(["podman", "rmi", "-f", ref], env=lab.env, check=False, capture_output=True)


def test_pod_runs_with_logs_and_exec(lab):
    try:
        proc = lab.playbook(PLAY)
        assert proc.returncode == 0, describe(proc)
        match = re.search(r"POD_IP=(\S+) LOG=(\S+) EXEC=(\S+)", proc.stdout)
        assert match, describe(proc)
        assert match.group(1).startswith(node_tier_of(lab)["pod_subnet"].rsplit(".", 1)[0] + "."), match.group(1)
        assert match.group(2) == "hello-from-the-lab-node"
        assert re.fullmatch(r"12\.\d+", match.group(3))
    finally:
        gone = lab.playbook(PLAY, extra_vars={"lab_state": "absent"})
        assert gone.returncode == 0, describe(gone)

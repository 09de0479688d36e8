"""The node tier: a Ready node, a real pod (image imported with ctr), logs and exec."""
import json
import re

import pytest

from lab_helpers import describe

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes]
PLAY = "tests/integration/lab/playbooks/node_pod.yml"


def test_node_is_ready(lab):
    assert lab.kube_nodes, "the node tier did not start"
    node = json.loads(lab.kubectl("get", "node", lab.kube_nodes[0], "-o", "json").stdout)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"


def test_pod_runs_with_logs_and_exec(lab):
    lab.load_image("localhost/smshare-node:debian12")
    try:
        proc = lab.playbook(PLAY)
        assert proc.returncode == 0, describe(proc)
        match = re.search(r"POD_IP=(\S+) LOG=(\S+) EXEC=(\S+)", proc.stdout)
        assert match, describe(proc)
        assert match.group(1).startswith("10.244.0.")
        assert match.group(2) == "hello-from-the-lab-node"
        assert re.fullmatch(r"12\.\d+", match.group(3))
    finally:
        gone = lab.playbook(PLAY, extra_vars={"lab_state": "absent"})
        assert gone.returncode == 0, describe(gone)

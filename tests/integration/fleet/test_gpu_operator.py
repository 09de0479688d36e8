"""The gpu_operator role against the lab's API server with the stand-in GPU Operator chart.

Two simulated GPU nodes without a host driver (the lab's node agent run as
processes, KWOK-style) take the operator's driver; the fleet's first container,
given a host driver by the driver play, shows what "both methods on one node"
is refused as.
"""
import base64
import gzip
import json
import subprocess
import sys
import time

import pytest
import yaml

from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.second_lab, pytest.mark.lab_fleet(2)]

PLAY = "tests/integration/fleet/playbooks/gpu_operator.yml"
NAMESPACE = "smshare-gpu-operator-test"
HARDWARE = {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "compute_cap": "8.0",
                      "uuid": "GPU-0", "pci_bus_id": "00000000:07:00.0"}] * 2, "nvswitches": 0}


@pytest.fixture(scope="module")
def operator_nodes(lab, tmp_path_factory):
    """Two Nodes with GPUs and no host driver, each kept by a node agent process."""
    work = tmp_path_factory.mktemp("operator-nodes")
    kubeconfig = yaml.safe_load(lab.kubeconfig.read_text())
    for name, data in (("ca.crt", kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]),
                       ("admin.crt", kubeconfig["users"][0]["user"]["client-certificate-data"]),
                       ("admin.key", kubeconfig["users"][0]["user"]["client-key-data"])):
        (work / name).write_bytes(base64.b64decode(data))
        (work / name).chmod(0o600)
    prefix = lab.gpu_nodes[0].rsplit("-gpu-", 1)[0] if lab.gpu_nodes else "smshare-lab"
    names = [f"{prefix}-op-{i:02d}" for i in (1, 2)]
    agents = []
    for index, name in enumerate(names, start=1):
        root = work / name
        (root / "etc" / "nvidia-standin").mkdir(parents=True)
        (root / "etc" / "nvidia-standin" / "gpus.json").write_text(json.dumps(HARDWARE))
        config = {"node_name": name, "apiserver": lab.apiserver, "ca_file": str(work / "ca.crt"),
                  "cert_file": str(work / "admin.crt"), "key_file": str(work / "admin.key"),
                  "standin_root": str(root), "state_dir": str(root / "run"), "pod_ip_prefix": f"10.246.{index}",
                  "registration_labels": {"nvidia.com/gpu.deploy.client": "true"},
                  "register_with_taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
        (root / "config.json").write_text(json.dumps(config))
        log = open(root / "agent.log", "w")
        agents.append(subprocess.Popen([sys.executable, str(lab.root / "lab" / "standin" / "node_agent" / "node_agent.py"),
                                        "--config", str(root / "config.json")], stdout=log, stderr=subprocess.STDOUT))
    deadline = time.time() + 60
    while time.time() < deadline:
        ready = lab.kubectl("get", "nodes", *names, "-o",
                            "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}", check=False).stdout
        if ready.split() == ["True", "True"]:
            break
        time.sleep(1)
    else:
        pytest.fail("the operator nodes did not become Ready: " + (work / names[0] / "agent.log").read_text())
    yield names
    subprocess.run([str(lab.root / "lab" / "bin" / "helm"), "uninstall", "gpu-operator", "-n", NAMESPACE,
                    "--ignore-not-found"], env=lab.env, capture_output=True, check=False)
    lab.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    for agent in agents:
        agent.terminate()
        agent.wait(timeout=30)
    lab.kubectl("delete", "node", *names, "--ignore-not-found")


def run(lab, nodes, version, *args, **extra):
    extra_vars = {"gpu_operator_nodes": nodes, "gpu_operator_driver_version": version,
                  "gpu_operator_namespace": NAMESPACE, "gpu_operator_poll_interval": 1,
                  "gpu_operator_wait_timeout": 180}
    extra_vars.update(extra)
    return lab.playbook(PLAY, *args, extra_vars=extra_vars)


def release_values(lab):
    proc = subprocess.run([str(lab.root / "lab" / "bin" / "helm"), "get", "values", "gpu-operator", "-n", NAMESPACE,
                           "-o", "json"], env=lab.env, capture_output=True, text=True, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def labels(lab, name):
    return json.loads(lab.kubectl("get", "node", name, "-o", "json").stdout)["metadata"]["labels"]


@pytest.mark.parametrize("extra, words", [
    ({"gpu_operator_host_driver_nodes": ["gpu-node-a"]}, ["gpu-node-a", "would get both", "Nothing was changed"]),
    ({"gpu_operator_driver_version": "latest"}, ["gpu_operator_driver_version is 'latest'", "615.71.09"]),
    ({"gpu_operator_chart_repo_url": "https://user:secret@charts.example.com/nvidia"},
     ["gpu_operator_chart_repo_url is 'https://", "charts.example.com/nvidia'", "without user:password@"]),
    ({"gpu_operator_nodes": ["no-such-node"]}, ["No Kubernetes Node named no-such-node"]),
    ({"gpu_operator_kubeconfig": "/nonexistent/smshare-kubeconfig"},
     ["gpu_operator_kubeconfig is /nonexistent/smshare-kubeconfig, which does not exist"]),
    ({"gpu_operator_values": ["driver.version=1"]}, ["gpu_operator_values", "dict"]),
    # A version read from a file keeps its newline: `$` would let it through.
    ({"gpu_operator_chart_version": "v26.7.1\n"}, ["gpu_operator_chart_version is 'v26.7.1", "pinned chart version"]),
    ({"gpu_operator_driver_version": "615.71.09\n"}, ["gpu_operator_driver_version is '615.71.09", "driver version"]),
])
def test_bad_input_and_mixed_methods_are_refused(lab, operator_nodes, extra, words):
    proc = run(lab, operator_nodes, "580.95.05", **extra)
    assert proc.returncode != 0, describe(proc)
    for word in words:
        assert word in proc.stdout, describe(proc)
    assert "secret" not in proc.stdout + proc.stderr
    assert release_values(lab) is None, "nothing may be installed"


def test_the_driver_play_refuses_gpu_operator_on_a_node_with_a_host_driver(lab):
    node = lab.gpu_nodes[0]
    converge = lab.playbook("playbooks/driver.yml", "-l", node)   # the host driver, as method host installs it
    assert converge.returncode == 0, describe(converge)
    proc = lab.playbook("playbooks/driver.yml", "-l", node, extra_vars={"smshare_driver_method": "gpu_operator"})
    assert proc.returncode != 0, describe(proc)
    assert "has smshare_driver_method gpu_operator but a host-installed driver" in proc.stdout, describe(proc)
    assert release_values(lab) is None


def test_a_node_with_a_host_driver_is_refused_the_operator(lab, operator_nodes):
    host_driver = lab.gpu_nodes[0]     # its driver was installed by the host method just before
    assert labels(lab, host_driver).get("nvidia.com/gpu.deploy.driver") == "pre-installed"
    proc = run(lab, [operator_nodes[0], host_driver], "580.95.05")
    assert proc.returncode != 0, describe(proc)
    assert f"{host_driver} already run a host-installed driver" in proc.stdout, describe(proc)
    assert release_values(lab) is None


def test_install_then_upgrade_the_operator_driver(lab, operator_nodes):
    proc = run(lab, operator_nodes, "580.95.05")
    assert proc.returncode == 0, describe(proc)
    assert release_values(lab)["driver"]["version"] == "580.95.05"
    for name in operator_nodes:
        assert labels(lab, name)["nvidia.com/cuda.driver-version.full"] == "580.95.05"
    daemonset = json.loads(lab.kubectl("-n", NAMESPACE, "get", "ds", "nvidia-driver-daemonset", "-o", "json").stdout)
    assert daemonset["metadata"]["labels"]["app.kubernetes.io/component"] == "nvidia-driver"
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04"
    # Only the GPU nodes without a host driver run it: the operator nodes and the
    # lab's containers still bare (provisioned without a driver), never the one
    # the host method converged.
    pods = json.loads(lab.kubectl("-n", NAMESPACE, "get", "pods", "-l", "app=nvidia-driver-daemonset",
                                  "-o", "json").stdout)["items"]
    bare = {n.split("/", 1)[1] for n in
            lab.kubectl("get", "nodes", "-l", "nvidia.com/gpu.deploy.driver=true", "-o", "name").stdout.split()}
    on = {p["spec"]["nodeName"] for p in pods}
    assert set(operator_nodes) <= on <= bare, (on, bare)
    assert lab.gpu_nodes[0] not in on

    again = run(lab, operator_nodes, "580.95.05")
    assert again.returncode == 0, describe(again)
    assert recap(again.stdout)["changed"] == 0, describe(again)

    check = run(lab, operator_nodes, "615.71.09", "--check", "--diff")
    assert check.returncode == 0, describe(check)
    assert recap(check.stdout)["changed"] == 1, describe(check)
    assert release_values(lab)["driver"]["version"] == "580.95.05", "check mode changed the release"

    upgrade = run(lab, operator_nodes, "615.71.09")
    assert upgrade.returncode == 0, describe(upgrade)
    assert "Driver 615.71.09 on" in upgrade.stdout, describe(upgrade)
    assert release_values(lab)["driver"]["version"] == "615.71.09"
    for name in operator_nodes:
        assert labels(lab, name)["nvidia.com/cuda.driver-version.full"] == "615.71.09"


def helm_record(lab, revision):
    return json.loads(lab.kubectl("-n", NAMESPACE, "get", "secret", f"sh.helm.release.v1.gpu-operator.v{revision}",
                                  "-o", "json").stdout)


def leave_pending(lab, revision):
    """Revision `revision`'s record as a helm killed mid-upgrade leaves it: status pending-upgrade
    in its label and in the release it stores (base64 of gzipped JSON, in the Secret's base64),
    which is what helm reads before it refuses an upgrade. The stand-in chart has no hook or
    wait long enough to kill a real helm in; the fork charts' test kills one
    (test_cluster_on_lab.py::test_a_helm_killed_mid_upgrade_is_cleared_by_the_next_run)."""
    secret = helm_record(lab, revision)
    release = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"]))))
    release["info"]["status"] = "pending-upgrade"
    secret["data"]["release"] = base64.b64encode(base64.b64encode(gzip.compress(json.dumps(release).encode()))).decode()
    secret["metadata"]["labels"]["status"] = "pending-upgrade"
    lab.kubectl("replace", "-f", "-", input_text=json.dumps(secret))


def helm_status(lab):
    """(status, revision) of the release, as `helm list --all` shows them ((None, None) when absent)."""
    proc = subprocess.run([str(lab.root / "lab" / "bin" / "helm"), "list", "-a", "-o", "json", "-n", NAMESPACE],
                          env=lab.env, capture_output=True, text=True, check=True)
    row = {r["name"]: r for r in json.loads(proc.stdout or "[]")}.get("gpu-operator", {})
    return row.get("status"), int(row["revision"]) if row.get("revision") else None


# After the test above (the release deployed at 615.71.09): an upgrade to 580.95.05 whose helm
# was killed leaves its revision pending, and helm refuses every later upgrade. The role refuses
# to race a helm that may still run; once the record is older than its helm timeout and a
# minute, it clears it, upgrades once from the revision before, and the run after changes nothing.
def test_a_pending_revision_left_by_a_killed_helm_is_cleared_by_the_next_run(lab, operator_nodes):
    proc = run(lab, operator_nodes, "580.95.05")
    assert proc.returncode == 0, describe(proc)
    status, revision = helm_status(lab)
    assert status == "deployed", status
    leave_pending(lab, revision)
    started = time.monotonic()
    assert helm_status(lab) == ("pending-upgrade", revision)
    refused = run(lab, operator_nodes, "580.95.05", gpu_operator_helm_timeout=5)
    out = " ".join(refused.stdout.split())
    assert refused.returncode != 0, describe(refused)
    assert f"has pending-upgrade revision {revision} since" in out and "may still be running" in out \
        and "Nothing was changed." in out, describe(refused)
    assert helm_status(lab) == ("pending-upgrade", revision)
    time.sleep(max(0.0, 66 - (time.monotonic() - started)))
    cleared = run(lab, operator_nodes, "580.95.05", gpu_operator_helm_timeout=5)
    out = " ".join(cleared.stdout.split())
    assert cleared.returncode == 0, describe(cleared)
    assert f"gpu-operator revision {revision}, pending-upgrade since" in out, describe(cleared)
    assert helm_status(lab) == ("deployed", revision)
    assert release_values(lab)["driver"]["version"] == "580.95.05"
    for name in operator_nodes:
        assert labels(lab, name)["nvidia.com/cuda.driver-version.full"] == "580.95.05"
    again = run(lab, operator_nodes, "580.95.05")
    assert again.returncode == 0, describe(again)
    assert recap(again.stdout)["changed"] == 0, describe(again)

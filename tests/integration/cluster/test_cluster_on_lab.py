"""The cluster roles on the lab, end to end: site.yml converges a clean lab once
(preflight, driver, images built and pushed, both charts installed from the
stand-in forks, images pulled by the node tier over TLS with the pull secret)
and every later test works on that install, in file order:

re-run and --check --diff change nothing -> --check --diff shows the values a
change would bring -> refused inputs change nothing -> preflight names a
missing permission, a missing RuntimeClass and a GPU stack below its floor ->
a digest that differs and a foreign image are named -> uninstall in order
leaves nothing, and again changes nothing -> with the operator gone, uninstall
reports the stuck finalizer and changes nothing, and uninstall_force clears it.
"""
import base64
import json
import re
import subprocess
import time

import pytest
import yaml

from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]

PLAYBOOKS = "tests/integration/cluster/playbooks"
FINALIZER = "gpu-fractioning.nvidia.com/cleanup-node-conditions"
NODE_CONDITION = "gpu-fractioning.nvidia.com/Ready"
CONFIG = "gpufractioningconfigs.gpu-fractioning.kai.scheduler"


# ------------------------------------------------------------------ helpers
def kube_json(lab, *args):
    proc = lab.kubectl(*args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def releases(lab):
    """{name: (status, revision)} of every helm release in the lab (helm list -A)."""
    found = {}
    for namespace in ("kai-scheduler", "gpu-fractioning"):
        out = subprocess.run([str(lab.root / "lab" / "bin" / "helm"), "list", "-a", "-o", "json", "-n", namespace],
                             env=lab.env, capture_output=True, text=True, check=True).stdout
        for row in json.loads(out or "[]"):
            found[row["name"]] = (row["status"], row["revision"])
    return found


def lab_vars(lab):
    return yaml.safe_load((lab.state_dir / "inventory" / "group_vars" / "smshare_lab" / "lab.yml").read_text())


def manifest(lab):
    return json.loads((lab.state_dir / "fork_images_manifest.json").read_text())


def knob(lab, key, value=None):
    """Set (or, with None, remove) a stand-in misbehaviour knob (lab/standin/charts/CONTRACT.md)."""
    if value is None:
        lab.kubectl("-n", "smshare-lab", "patch", "configmap", "standin-knobs", "--type", "json",
                    "-p", json.dumps([{"op": "remove", "path": "/data/" + key.replace("/", "~1")}]), check=False)
    else:
        lab.kubectl("-n", "smshare-lab", "patch", "configmap", "standin-knobs", "--type", "merge",
                    "-p", json.dumps({"data": {key: value}}))


def wait_for(what, check, timeout=240, step=3):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(step)


def node_condition(lab, node):
    obj = kube_json(lab, "get", "node", node)
    return {c["type"]: c["status"] for c in obj["status"].get("conditions", [])}.get(NODE_CONDITION)


def assert_hosts(lab, proc, **expected):
    assert proc.returncode == 0, describe(proc)
    for host in [*lab.gpu_nodes, "localhost"]:
        counts = recap(proc.stdout, host)
        for key, value in expected.items():
            assert counts[key] == value, f"{host}: {key}={counts[key]}\n{describe(proc)}"


# ------------------------------------------------------------------ the converge
@pytest.fixture(scope="module")
def converged(lab):
    """site.yml on the lab, once for the module."""
    if not lab.gpu_nodes or not lab.node_tier:
        pytest.fail("the lab has no GPU nodes or no node tier (see labctl up's output)")
    started = time.monotonic()
    proc = lab.playbook("site.yml")
    print(f"\n[cluster] site.yml converge: {time.monotonic() - started:.0f} s")
    assert_hosts(lab, proc, failed=0)
    yield proc
    # Leave the shared lab without KAI for the tests after this module (the
    # pilot refuses a cluster that has KAI's CRDs).
    lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_purge": True, "uninstall_force": True})


def test_site_converges_and_every_check_holds_on_the_cluster(lab, converged):
    out = converged.stdout
    # Every play ran and reported its checks.
    for line in ("Preflight on localhost", "deployments Available", "kai-config reports DependenciesFulfilled=True",
                 "logs the multi-user shared server", "containers run"):
        assert line in out, line
    # What the guide's checks look at, read independently of the roles.
    assert {name: state[0] for name, state in releases(lab).items()} == {
        "kai-scheduler": "deployed", "gpu-fractioning": "deployed"}
    config = kube_json(lab, "get", "config.kai.scheduler", "kai-config")
    assert config["spec"]["global"]["gpuSharingMode"] == "NvFractions"
    assert {c["type"]: c["status"] for c in config["status"]["conditions"]}["DependenciesFulfilled"] == "True"
    frac = kube_json(lab, "get", CONFIG, "default")
    assert FINALIZER in frac["metadata"]["finalizers"]
    assert {c["type"]: c["status"] for c in frac["status"]["conditions"]}["Ready"] == "True"
    for node in lab.kube_nodes:
        assert node_condition(lab, node) == "True"
    # The pods were pulled from the lab registry at the digests the images role recorded.
    recorded = {(i["fork"], i["service"]): i["digest"] for i in manifest(lab)["images"]}
    registry = lab_vars(lab)["smshare_lab_registry_address"] + "/kai-fork"
    forks = (("kai-scheduler", "kai-scheduler", "kai_scheduler"), ("gpu-fractioning", "kai-gpu-fractioning", "gpu_fractioning"))
    for namespace, path, fork in forks:
        pods = kube_json(lab, "-n", namespace, "get", "pods")["items"]
        assert pods
        for pod in pods:
            for status in pod["status"]["containerStatuses"]:
                repo, digest = status["imageID"].split("@")
                assert repo.startswith(f"{registry}/{path}/"), status
                assert digest == recorded[(fork, repo.rsplit("/", 1)[1])], status
            assert pod["spec"]["imagePullSecrets"] == [{"name": "kai-fork-registry"}], pod["metadata"]["name"]
    secret = kube_json(lab, "-n", "kai-scheduler", "get", "secret", "kai-fork-registry")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    auths = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))["auths"]
    assert list(auths) == [lab.registry.address]
    # The password never reaches the output.
    assert lab.registry.password not in out


def test_rerun_changes_nothing(lab, converged):
    assert_hosts(lab, lab.playbook("site.yml"), failed=0, changed=0)


def test_check_diff_changes_nothing(lab, converged):
    before = releases(lab)
    proc = lab.playbook("site.yml", "--check", "--diff")
    assert_hosts(lab, proc, failed=0, changed=0)
    assert releases(lab) == before


def test_check_diff_shows_the_values_a_change_would_bring(lab, converged):
    before = releases(lab)
    proc = lab.playbook("playbooks/kai_scheduler.yml", "--check", "--diff", "--tags", "kai_scheduler_install",
                        extra_vars={"kai_scheduler_gpu_sharing_mode": "Disabled"})
    assert proc.returncode == 0, describe(proc)
    assert re.search(r'-\s+"gpuSharingMode": "NvFractions"', proc.stdout), describe(proc)
    assert re.search(r'\+\s+"gpuSharingMode": "Disabled"', proc.stdout), describe(proc)
    assert releases(lab) == before
    assert kube_json(lab, "get", "config.kai.scheduler", "kai-config")["spec"]["global"]["gpuSharingMode"] == "NvFractions"


def test_refused_inputs_change_nothing(lab, converged):
    before = releases(lab)
    proc = lab.playbook(f"{PLAYBOOKS}/refusals.yml")
    assert proc.returncode == 0, describe(proc)
    assert "REFUSAL-" not in proc.stdout, describe(proc)
    assert proc.stdout.count("REFUSED ") == 12, describe(proc)
    assert recap(proc.stdout)["changed"] == 0
    assert releases(lab) == before


def test_secret_stays_out_of_verbose_output(lab, converged):
    proc = lab.playbook("playbooks/kai_scheduler.yml", "--tags", "kai_scheduler_secret", "-vvv")
    assert proc.returncode == 0, describe(proc)
    assert lab.registry.password not in proc.stdout + proc.stderr
    assert base64.b64encode(f"{lab.registry.username}:{lab.registry.password}".encode()).decode() \
        not in proc.stdout + proc.stderr


# ------------------------------------------------------------------ preflight
@pytest.fixture
def limited_kubeconfig(lab, tmp_path):
    """A ServiceAccount that may read what preflight reads and create everything
    the guide lists but priorityclasses."""
    name = "smshare-preflight-test"
    manifest_text = f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}, namespace: default}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {name}}}
rules:
- apiGroups: [""]
  resources: [nodes, namespaces]
  verbs: [get, list, create]
- apiGroups: [node.k8s.io]
  resources: [runtimeclasses]
  verbs: [get, list]
- apiGroups: [apps]
  resources: [deployments, daemonsets]
  verbs: [get, list]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [create]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles, clusterrolebindings]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}
subjects: [{{kind: ServiceAccount, name: {name}, namespace: default}}]
"""
    lab.kubectl("apply", "-f", "-", input_text=manifest_text)
    secret = wait_for("the ServiceAccount's token", lambda: (kube_json(lab, "-n", "default", "get", "sa", name)
                                                             or {}).get("secrets"))[0]["name"]
    token = base64.b64decode(kube_json(lab, "-n", "default", "get", "secret", secret)["data"]["token"]).decode()
    admin = yaml.safe_load(lab.kubeconfig.read_text())
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "limited",
              "clusters": admin["clusters"],
              "contexts": [{"name": "limited", "context": {"cluster": admin["clusters"][0]["name"], "user": name}}],
              "users": [{"name": name, "user": {"token": token}}]}
    path = tmp_path / "limited.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    yield path
    lab.kubectl("delete", "-f", "-", "--ignore-not-found", input_text=manifest_text, check=False)


def test_preflight_names_a_missing_permission_and_a_missing_runtime_class(lab, converged, limited_kubeconfig):
    proc = lab.playbook("playbooks/preflight.yml", "--limit", "localhost",
                        extra_vars={"preflight_kubeconfig": str(limited_kubeconfig),
                                    "preflight_runtime_class": "nvidia-missing"})
    assert proc.returncode != 0, describe(proc)
    out = proc.stdout
    assert re.search(r"FAIL\s+may create priorityclasses\s+no", out), describe(proc)
    assert re.search(r"PASS\s+may create clusterroles\s+yes", out), describe(proc)
    assert re.search(r"FAIL\s+RuntimeClass nvidia-missing\s+missing", out), describe(proc)
    assert "grant create on priorityclasses (scheduling.k8s.io)" in out
    assert "create the RuntimeClass nvidia-missing" in out
    assert "Nothing was installed" in out


def test_preflight_names_a_gpu_stack_below_its_floor(lab, converged):
    """Stand-in workloads with the GPU Operator's image names (nothing runs:
    0 replicas, a node selector no node has)."""
    namespace = "smshare-preflight-gpu-stack"
    manifest_text = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: gpu-operator, namespace: {namespace}}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: gpu-operator}}}}
  template:
    metadata: {{labels: {{app: gpu-operator}}}}
    spec: {{containers: [{{name: operator, image: "nvcr.io/nvidia/gpu-operator:v26.7.0"}}]}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: nvidia-device-plugin-daemonset, namespace: {namespace}}}
spec:
  selector: {{matchLabels: {{app: device-plugin}}}}
  template:
    metadata: {{labels: {{app: device-plugin}}}}
    spec:
      nodeSelector: {{smshare.io/no-such-node: "true"}}
      containers: [{{name: plugin, image: "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}}]
"""
    lab.kubectl("apply", "-f", "-", input_text=manifest_text)
    try:
        proc = lab.playbook("playbooks/preflight.yml", "--limit", "localhost", "--tags", "preflight_cluster",
                            extra_vars={"preflight_gpu_stack_floors": {"gpu-operator": "26.7.1",
                                                                       "container-toolkit": "1.20.1",
                                                                       "k8s-device-plugin": "0.20.1"}})
    finally:
        lab.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert proc.returncode != 0, describe(proc)
    out = proc.stdout
    assert re.search(rf"FAIL\s+gpu-operator version\s+26\.7\.0 \({namespace}/gpu-operator\)\s+>= 26\.7\.1", out), \
        describe(proc)
    assert re.search(r"FAIL\s+container-toolkit version\s+not found", out), describe(proc)
    assert re.search(r"PASS\s+k8s-device-plugin version\s+0\.20\.1", out), describe(proc)


# ------------------------------------------------------------------ images
def test_a_digest_that_differs_from_the_manifest_is_named(lab, converged, tmp_path):
    doctored = manifest(lab)
    binder = next(i for i in doctored["images"] if (i["fork"], i["service"]) == ("kai_scheduler", "binder"))
    real, binder["digest"] = binder["digest"], "sha256:" + "0" * 64
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doctored))
    proc = lab.playbook("playbooks/kai_scheduler.yml", "--tags", "kai_scheduler_verify",
                        extra_vars={"kai_scheduler_image_manifest_path": str(path)})
    assert proc.returncode != 0, describe(proc)
    assert re.search(rf"binder-\S+ \(binder\) pulled \S+/kai-scheduler/binder@{real}, but the images play "
                     rf"recorded sha256:0{{64}}", proc.stdout), describe(proc)


@pytest.fixture
def foreign_binder(lab, converged):
    """binder running the same program from another repository of the registry
    (the KAI operator paused so it does not put its own image back)."""
    tag = manifest(lab)["tag"]
    base = lab_vars(lab)["smshare_lab_registry_address"] + "/kai-fork"
    ours, foreign = f"{base}/kai-scheduler/binder:{tag}", f"{base}/elsewhere/binder:{tag}"
    creds = f"{lab.registry.username}:{lab.registry.password}"
    subprocess.run(["skopeo", "copy", "--quiet", "--src-cert-dir", lab.registry.cert_dir, "--dest-cert-dir",
                    lab.registry.cert_dir, "--src-creds", creds, "--dest-creds", creds,
                    f"docker://{ours}", f"docker://{foreign}"], check=True, capture_output=True, text=True)
    knob(lab, "kai-operator.paused", "true")
    lab.kubectl("-n", "kai-scheduler", "set", "image", "deploy/binder", f"binder={foreign}")
    lab.kubectl("-n", "kai-scheduler", "rollout", "status", "deploy/binder", "--timeout=240s")
    yield foreign
    lab.kubectl("-n", "kai-scheduler", "set", "image", "deploy/binder", f"binder={ours}", check=False)
    knob(lab, "kai-operator.paused")
    lab.kubectl("-n", "kai-scheduler", "rollout", "status", "deploy/binder", "--timeout=240s", check=False)
    # The node now holds the same image under both names and may report the
    # foreign one as the pod's image ID: drop that name, restart binder.
    # Every name of it: the tag and the repo@sha256 reference the CRI adds on pull.
    ctr = ["ctr", "--address", lab_vars(lab)["smshare_lab_node_tier"]["cri_socket"], "-n", "k8s.io", "images"]
    names = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, check=False).stdout.split()
    stale = [n for n in names if n.startswith(foreign.rsplit(":", 1)[0] + ":") or n.startswith(foreign.rsplit(":", 1)[0] + "@")]
    if stale:
        subprocess.run([*ctr, "rm", *stale], capture_output=True, check=False)
    lab.kubectl("-n", "kai-scheduler", "delete", "pod", "-l", "app=binder", "--wait=true", check=False)
    lab.kubectl("-n", "kai-scheduler", "rollout", "status", "deploy/binder", "--timeout=240s", check=False)


def test_a_foreign_image_is_named(lab, foreign_binder):
    proc = lab.playbook("playbooks/kai_scheduler.yml", "--tags", "kai_scheduler_verify")
    assert proc.returncode != 0, describe(proc)
    assert re.search(rf"binder-\S+ \(binder\) runs {re.escape(foreign_binder)}, not an image of this build",
                     proc.stdout), describe(proc)


# ------------------------------------------------------------------ uninstall
def leftovers(lab):
    """What an uninstall in the guide's order must not leave behind."""
    found = []
    if releases(lab):
        found.append(f"releases {releases(lab)}")
    if kube_json(lab, "get", "crd", CONFIG) and kube_json(lab, "get", CONFIG, "default"):
        found.append("GpuFractioningConfig default")
    daemonsets = kube_json(lab, "-n", "gpu-fractioning", "get", "daemonsets")
    if daemonsets and daemonsets["items"]:
        found.append("DaemonSets " + ", ".join(d["metadata"]["name"] for d in daemonsets["items"]))
    pods = kube_json(lab, "-n", "gpu-fractioning", "get", "pods", "-l", "app.kubernetes.io/component=mpsd")
    if pods and pods["items"]:
        found.append("mpsd pods")
    for node in lab.kube_nodes:
        if node_condition(lab, node) is not None:
            found.append(f"{NODE_CONDITION} on {node}")
    return found


def test_uninstall_in_order_leaves_nothing_and_a_rerun_changes_nothing(lab, converged):
    proc = lab.playbook("playbooks/uninstall.yml")
    assert proc.returncode == 0, describe(proc)
    assert leftovers(lab) == []
    assert kube_json(lab, "get", "config.kai.scheduler", "kai-config") is None
    # The purge: the queues, CRDs and namespaces Helm keeps.
    proc = lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_purge": True})
    assert proc.returncode == 0, describe(proc)
    crds = kube_json(lab, "get", "crd")["items"]
    assert [c["metadata"]["name"] for c in crds
            if re.search(r"kai\.scheduler|scheduling\.run\.ai", c["metadata"]["name"])] == []
    namespaces = {n["metadata"]["name"] for n in kube_json(lab, "get", "namespaces")["items"]}
    assert not namespaces & {"kai-scheduler", "gpu-fractioning", "kai-resource-reservation"}
    again = lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_purge": True})
    assert again.returncode == 0, describe(again)
    assert recap(again.stdout)["changed"] == 0, describe(again)


def test_uninstall_reports_a_stuck_finalizer_and_force_clears_it(lab, converged):
    # Half an install: gpu-fractioning alone (KAI is gone since the last test).
    proc = lab.playbook("playbooks/gpu_fractioning.yml", extra_vars={"gpu_fractioning_check_kai_config": False})
    assert proc.returncode == 0, describe(proc)
    # The operator goes first, as when the chart is uninstalled before the config.
    lab.kubectl("-n", "gpu-fractioning", "scale", "deploy/gpu-fractioning", "--replicas=0")
    wait_for("the operator's pods to go", lambda: not kube_json(
        lab, "-n", "gpu-fractioning", "get", "pods", "-l", "app.kubernetes.io/name=gpu-fractioning")["items"])
    before = releases(lab)

    stuck = lab.playbook("playbooks/uninstall.yml")
    assert stuck.returncode != 0, describe(stuck)
    assert f"carries the finalizer {FINALIZER}" in stuck.stdout, describe(stuck)
    assert "uninstall_force=true" in stuck.stdout and "would hang forever" in stuck.stdout
    refused = lab.playbook("playbooks/uninstall.yml", "--tags", "uninstall_releases")
    assert refused.returncode != 0, describe(refused)
    assert "GpuFractioningConfig default still exists" in refused.stdout, describe(refused)
    config = kube_json(lab, "get", CONFIG, "default")
    assert config and "deletionTimestamp" not in config["metadata"]
    assert releases(lab) == before

    forced = lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_force": True})
    assert forced.returncode == 0, describe(forced)
    assert kube_json(lab, "get", CONFIG, "default") is None
    assert releases(lab) == {}
    daemonsets = kube_json(lab, "-n", "gpu-fractioning", "get", "daemonsets")
    assert not daemonsets or not daemonsets["items"]
    # The operator marked its node conditions Unknown when it stopped; the role names them.
    for node in lab.kube_nodes:
        if node_condition(lab, node) is not None:
            assert node in forced.stdout, describe(forced)

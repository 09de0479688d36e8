"""The cluster roles on the lab, end to end: site.yml converges a clean lab once
through a copy of inventories/airgap and the lab overlay (conftest.py):
preflight, driver, images built and pushed, both charts installed from the
stand-in forks, images pulled by the node tier over TLS with the pull secret.
Every later test works on that install, in file order:

the README's --check --diff, then its converge, through a copy of inventories/a100
and the lab overlay change nothing -> --check --diff shows the values a
change would bring -> refused inputs change nothing -> preflight names a
missing permission, a missing RuntimeClass, a GPU stack below its floor and a
GPU node without nvidia.com/gpu.memory -> a digest that differs and a foreign
image are named -> mpsd without multi-user mode fails the log check -> mpsd
whose memory limit is too small for the node's GPUs crash-loops and the verify
names CUDA_ERROR_OUT_OF_MEMORY and the knob (the install is restored after each).

The same converge serves test_smoke_on_lab.py; test_uninstall_on_lab.py runs
last in this directory and takes KAI off the lab (conftest.py).
"""
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from cluster_helpers import (CONFIG, FINALIZER, PLAYBOOKS, assert_hosts, flags_as_the_command_line_gives_them,
                             kube_json, knob, lab_vars, manifest, node_condition, releases, site_copy, wait_for)
from lab_helpers import describe, recap
from registry_state import unreadable
from secret_search import found_in_files, found_in_text, kept_env, secret_forms

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]


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


@pytest.fixture(scope="module")
def a100_copy(lab, tmp_path_factory):
    """inventories/a100 as a user takes it to the lab: copied, hosts.yml the lab's, plus the lab overlay."""
    return site_copy(lab, tmp_path_factory.mktemp("site"), "a100")


def test_check_diff_changes_nothing(lab, converged, a100_copy):
    """README's preview through a copy of inventories/a100 (the converge was inventories/airgap's: both
    shipped inventories converge the lab to the same state); also with every boolean knob given as
    `-e name=false` gives it: a string."""
    before = releases(lab)
    flags = flags_as_the_command_line_gives_them(lab, a100_copy)
    assert len(flags) > 20, flags
    proc = lab.playbook("site.yml", "--check", "--diff", *flags, inventory=a100_copy)
    assert_hosts(lab, proc, failed=0, changed=0)
    assert releases(lab) == before


def test_rerun_changes_nothing(lab, converged, a100_copy):
    """README's converge, as written, through the same copy."""
    assert_hosts(lab, lab.playbook("site.yml", inventory=a100_copy), failed=0, changed=0)


def test_check_diff_shows_the_values_a_change_would_bring(lab, converged):
    before = releases(lab)
    proc = lab.playbook("playbooks/kai_scheduler.yml", "--check", "--diff", "--tags", "kai_scheduler_install",
                        extra_vars={"kai_scheduler_gpu_sharing_mode": "Disabled"})
    assert proc.returncode == 0, describe(proc)
    assert re.search(r'-\s+"gpuSharingMode": "NvFractions"', proc.stdout), describe(proc)
    assert re.search(r'\+\s+"gpuSharingMode": "Disabled"', proc.stdout), describe(proc)
    assert releases(lab) == before
    assert kube_json(lab, "get", "config.kai.scheduler", "kai-config")["spec"]["global"]["gpuSharingMode"] == "NvFractions"


def test_the_admission_policy_is_refused_by_the_labs_kubernetes_version(lab, converged):
    """The lab's Kubernetes 1.20.2 predates admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
    (1.30): the role refuses it by version, in check mode and for real, and installs nothing."""
    for args in (["--check", "--diff"], []):
        proc = lab.playbook("playbooks/admission_policy.yml", *args)
        out = " ".join(proc.stdout.split())
        assert proc.returncode != 0, describe(proc)
        assert "does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy" in out, describe(proc)
        assert "Nothing was changed" in out, describe(proc)


def test_refused_inputs_change_nothing(lab, converged):
    before = releases(lab)
    proc = lab.playbook(f"{PLAYBOOKS}/refusals.yml")
    assert proc.returncode == 0, describe(proc)
    assert "REFUSAL-" not in proc.stdout, describe(proc)
    assert proc.stdout.count("REFUSED ") == 14, describe(proc)
    assert recap(proc.stdout)["changed"] == 0
    assert releases(lab) == before


# Every role that writes a pull secret, at -vvv, with Ansible's log and temp folders
# in the test's own: no form of the registry password (clear, base64 alone or inside
# a larger encoded text, URL-encoded, JSON-escaped; the lab's has the + / = of real
# registry tokens) in the output, the log or any file the run left there.
@pytest.mark.parametrize("play, tag", [("kai_scheduler", "kai_scheduler_secret"),
                                       ("gpu_fractioning", "gpu_fractioning_secret"),
                                       ("smoke_test", "smoke_test_secret")])
def test_no_form_of_the_registry_password_at_vvv(lab, converged, tmp_path, play, tag):
    proc = lab.playbook("playbooks/%s.yml" % play, "--tags", tag, "-vvv", env=kept_env(tmp_path))
    assert proc.returncode == 0, describe(proc)
    assert "ESTABLISH LOCAL CONNECTION" in proc.stdout and "holds the credentials of" in " ".join(proc.stdout.split()), \
        describe(proc)
    assert set("+/=") <= set(lab.registry.password), "the lab's password carries a token's + / = (lab/registry.sh)"
    forms = secret_forms(lab.registry.username, lab.registry.password)
    assert found_in_text(forms, proc.stdout + proc.stderr) == []
    assert (tmp_path / "ansible.log").stat().st_size > 0
    assert found_in_files(forms, [tmp_path]) == []


# A play killed while helm upgrades (issue 24, a half-finished run): helm itself,
# killed while it waits for pods that cannot start, leaves its revision
# pending-upgrade with the broken image tag applied. While that revision may
# still be a running helm's, the role refuses and changes nothing; once older than
# its helm timeout and a minute, the next run clears the record and upgrades from
# the revision before it (whose values are the role's: the upgrade runs all the
# same), with the role's tag back on every pod template.
def test_a_helm_killed_mid_upgrade_is_cleared_by_the_next_run(lab, converged):
    chart = next((lab.state_dir / "charts").glob("kai-scheduler-*/deployments/kai-scheduler"))
    status, revision = releases(lab)["kai-scheduler"]
    assert status == "deployed", releases(lab)
    pending = ["-n", "kai-scheduler", "get", "secret", "-l", "owner=helm,name=kai-scheduler,status=pending-upgrade",
               "-o", "jsonpath={.items[*].metadata.name}"]
    helm = subprocess.Popen([str(lab.root / "lab" / "bin" / "helm"), "upgrade", "kai-scheduler", str(chart),
                             "-n", "kai-scheduler", "--reuse-values", "--set", "global.tag=smshare-killed-upgrade",
                             "--wait", "--timeout", "600s"], env=lab.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def pending_record():
        return lab.kubectl(*pending).stdout.strip()

    try:
        left = wait_for("helm's pending-upgrade record", pending_record, timeout=120, step=0.5)
        started = time.monotonic()
    finally:
        helm.kill()
        helm.wait()
    assert left == "sh.helm.release.v1.kai-scheduler.v%d" % (int(revision) + 1), left
    install = ["playbooks/kai_scheduler.yml", "--tags", "kai_scheduler_install"]
    short = {"kai_scheduler_wait_timeout": 5}     # stale after 5 s + a minute
    try:
        refused = lab.playbook(*install, extra_vars=short)
        out = " ".join(refused.stdout.split())
        assert refused.returncode != 0 and "has pending-upgrade revision %d since" % (int(revision) + 1) in out \
            and "may still be running" in out and "Nothing was changed." in out, describe(refused)
        assert pending_record() == left
        time.sleep(max(0.0, 66 - (time.monotonic() - started)))
        cleared = lab.playbook(*install, extra_vars=short)
        out = " ".join(cleared.stdout.split())
        assert cleared.returncode == 0 and "kai-scheduler revision %d, pending-upgrade since" % (int(revision) + 1) \
            in out, describe(cleared)
        assert pending_record() == ""
        status, now = releases(lab)["kai-scheduler"]
        assert (status, str(now)) == ("deployed", str(int(revision) + 1))
        images = lab.kubectl("-n", "kai-scheduler", "get", "deployments", "-o",
                             "jsonpath={.items[*].spec.template.spec.containers[*].image}").stdout.split()
        assert images and not [i for i in images if "smshare-killed-upgrade" in i], images
    finally:
        back = lab.playbook("playbooks/kai_scheduler.yml")
    assert back.returncode == 0, describe(back)
    assert recap(back.stdout)["changed"] == 0, describe(back)


# The nodes' pulls of a KAI image failing (the registry answering 500 for its manifest, the node's
# cached copy gone, the pod re-created): the release's check names the pod, the pull and the
# registry's answer, not only "Available=False". Once the registry answers, a plain re-run passes
# (the kubelet retries the pull) and changes nothing.
def test_failing_image_pulls_are_named_and_a_rerun_passes_once_the_registry_answers(lab, converged):
    sys.path.insert(0, str(lab.root / "lab"))
    from smshare_lab import node_tier   # pylint: disable=import-outside-toplevel
    deployment = "binder"
    image = lab.kubectl("-n", "kai-scheduler", "get", "deployment", deployment, "-o",
                        "jsonpath={.spec.template.spec.containers[0].image}").stdout.strip()
    host, path = image.split("/", 1)
    assert host == lab.registry.address and "@" not in path, image
    repository, tag = path.rsplit(":", 1)
    verify = ["playbooks/kai_scheduler.yml", "--tags", "kai_scheduler_verify"]
    try:
        with unreadable(lab.registry.revision_link(repository, tag)):
            node_tier.forget_images(image)
            pods = [p["metadata"]["name"] for p in kube_json(lab, "-n", "kai-scheduler", "get", "pods")["items"]
                    if (p["metadata"].get("ownerReferences") or [{}])[0].get("name", "").rsplit("-", 1)[0]
                    == deployment]
            assert pods, "no pod of deployment " + deployment
            lab.kubectl("-n", "kai-scheduler", "delete", "pod", *pods, "--wait=false")
            failed = lab.playbook(*verify, extra_vars={"kai_scheduler_wait_timeout": 45})
        out = " ".join(failed.stdout.split())
        assert failed.returncode != 0, describe(failed)
        assert f"Not Available after 45 s: {deployment}:" in out and "Image pulls fail: pod binder-" in out, \
            describe(failed)
        assert "500" in out.split("Image pulls fail:")[1], describe(failed)
        assert "the kubelet retries the pull, so run again once it is fixed" in out, describe(failed)
    finally:
        back = lab.playbook("playbooks/kai_scheduler.yml")
    assert back.returncode == 0, describe(back)
    assert recap(back.stdout)["changed"] == 0, describe(back)


def _pid(lab, component):
    return int((lab.state_dir / "run" / f"{component}.pid").read_text().split()[0])


# The API server lost while the release's check waits: the wait goes on through failed reads
# until its deadline and its check names the lost server, not a missing object. (The
# controller-manager is paused so that a restarted Deployment's rollout is still being waited
# on when the server goes.) Once the server is back, a plain re-run passes and changes nothing.
def test_a_lost_api_server_during_the_checks_is_named_and_a_rerun_passes(lab, converged):
    manager = _pid(lab, "kube-controller-manager")
    verify = ["playbooks/kai_scheduler.yml", "--tags", "kai_scheduler_verify"]
    os.kill(manager, signal.SIGSTOP)
    try:
        lab.kubectl("-n", "kai-scheduler", "rollout", "restart", "deployment/binder")
        play = lab.start_playbook(*verify, extra_vars={"kai_scheduler_wait_timeout": 30,
                                                       "kai_scheduler_poll_interval": 2})
        lines = []
        for line in play.stdout:
            lines.append(line)
            if "Wait for the Deployments and the checks of" in line:
                time.sleep(3)       # a read or two fails the rollout first
                lab.kill_api_server()
                break
        lines.append(play.communicate(timeout=300)[0])
    finally:
        os.kill(manager, signal.SIGCONT)
        lab.bring_back()
    out = " ".join("".join(lines).split())
    assert play.returncode != 0, out[-4000:]
    assert "The last read of the cluster failed:" in out and "The API server may have stopped answering: check " \
        "it (kubectl get --raw /readyz), then run again: the run goes on from what is installed." in out, out[-4000:]
    back = lab.playbook("playbooks/kai_scheduler.yml")
    assert back.returncode == 0, describe(back)
    assert recap(back.stdout)["changed"] == 0, describe(back)


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
                            extra_vars={"preflight_gpu_operator_minimum_version": "v26.7.1",
                                        "preflight_gpu_stack_floors": {"container-toolkit": "1.20.1",
                                                                       "k8s-device-plugin": "0.20.1"}})
    finally:
        lab.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert proc.returncode != 0, describe(proc)
    out = proc.stdout
    assert re.search(rf"FAIL\s+gpu-operator version\s+26\.7\.0 \({namespace}/gpu-operator\)\s+>= 26\.7\.1", out), \
        describe(proc)
    assert re.search(r"FAIL\s+container-toolkit version\s+not found", out), describe(proc)
    assert re.search(r"PASS\s+k8s-device-plugin version\s+0\.20\.1", out), describe(proc)
    assert "lower smshare_gpu_operator_minimum_version" in out, describe(proc)


def test_preflight_names_a_gpu_node_without_its_gpu_memory_label(lab, converged):
    """The guide's row 5: without nvidia.com/gpu.memory the binder cannot cap a
    fractional pod's memory (the pod stays Pending, only a binder event says why)."""
    node = lab.kube_nodes[0]
    memory = kube_json(lab, "get", "node", node)["metadata"]["labels"]["nvidia.com/gpu.memory"]
    lab.kubectl("label", "node", node, "nvidia.com/gpu.memory-")
    try:
        proc = lab.playbook("playbooks/preflight.yml", "--limit", "localhost", "--tags", "preflight_cluster")
    finally:
        lab.kubectl("label", "node", node, f"nvidia.com/gpu.memory={memory}", "--overwrite")
    assert proc.returncode != 0, describe(proc)
    assert re.search(rf"FAIL\s+label nvidia\.com/gpu\.memory \(MiB\)\s+{re.escape(node)}: missing", proc.stdout), \
        describe(proc)
    assert "node does not include nvidia.com/gpu.memory label" in proc.stdout
    assert re.search(r"PASS\s+label nvidia\.com/gpu\.present=true", proc.stdout), describe(proc)


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


# ------------------------------------------------------------------ mpsd (the guide's step 4 and Troubleshooting)
MPSD = "app.kubernetes.io/component=mpsd"


def restart_mpsd(lab):
    """A new mpsd pod, ready (the DaemonSet brings it back)."""
    lab.kubectl("-n", "gpu-fractioning", "delete", "pod", "-l", MPSD, "--wait=true", "--timeout=120s")
    wait_for("mpsd ready again", lambda: (kube_json(lab, "-n", "gpu-fractioning", "get", "ds",
                                                    "gpu-fractioning-mpsd") or {}).get("status", {}).get("numberReady")
             == 1 and not [p for p in kube_json(lab, "-n", "gpu-fractioning", "get", "pods", "-l", MPSD)["items"]
                           if p["metadata"].get("deletionTimestamp")])


def test_mpsd_log_check_names_a_daemon_without_multiuser_mode(lab, converged):
    knob(lab, "mpsd.multiuser", "false")
    try:
        restart_mpsd(lab)
        log = lab.kubectl("-n", "gpu-fractioning", "logs", "ds/gpu-fractioning-mpsd").stdout
        start = [json.loads(line) for line in log.splitlines()
                 if line.startswith("{") and json.loads(line)["msg"] == "starting MPS daemon"]
        assert start and "-m" not in start[-1]["args"], log
        proc = lab.playbook("playbooks/gpu_fractioning.yml", "--tags", "gpu_fractioning_verify")
    finally:
        knob(lab, "mpsd.multiuser")
    restart_mpsd(lab)
    assert proc.returncode != 0, describe(proc)
    out = " ".join(proc.stdout.split())   # the message as one line, however the callback wrapped it
    assert re.search(r"mpsd pod gpu-fractioning-mpsd-\S+ on \S+ never logged multi-user mode: mpsd started MPS "
                     r"without -m \(args -p 3 -f -a /etc/nvidia-mps/mps-control\.toml\)", out), describe(proc)
    assert "never logged the default namespace cap" not in out, describe(proc)
    # The restored mpsd passes the check from its JSON lines and the daemon's own.
    proc = lab.playbook("playbooks/gpu_fractioning.yml", "--tags", "gpu_fractioning_verify")
    assert proc.returncode == 0 and "logs the multi-user shared server" in proc.stdout, describe(proc)


def mpsd_pod(lab):
    pods = [p for p in kube_json(lab, "-n", "gpu-fractioning", "get", "pods", "-l", MPSD)["items"]
            if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else None


def mpsd_memory_limit(pod):
    return pod["spec"]["containers"][0].get("resources", {}).get("limits", {}).get("memory") if pod else None


def crash_looping_at(pod, limit):
    return mpsd_memory_limit(pod) == limit and any(
        s.get("restartCount", 0) >= 1 for s in pod["status"].get("containerStatuses") or [])


def test_mpsd_out_of_host_memory_is_named_with_its_knob(lab, converged):
    """256Mi holds five of the 8 GPUs' server contexts (about 50 MiB each): mpsd
    exits with CUDA_ERROR_OUT_OF_MEMORY and crash-loops; the verify says which knob.

    The knob reaches the chart as mpsDaemon.resources.limits.memory (--check --diff
    shows it), which only the chart's GpuFractioningConfig hook carries. An upgrade
    re-creates that hook (before-hook-creation); the lab's helm does not wait for
    the old config's finalizer before creating the new one, as Helm 3 does, and the
    new one is lost. So the test puts the value on the config as the hook would."""
    preview = lab.playbook("playbooks/gpu_fractioning.yml", "--check", "--diff", "--tags", "gpu_fractioning_install",
                           extra_vars={"gpu_fractioning_mpsd_memory_limit": "256Mi"})
    assert preview.returncode == 0, describe(preview)
    assert re.search(r'\+\s+"mpsDaemon": \{\s+\+\s+"resources": \{\s+\+\s+"limits": \{\s+\+\s+"memory": "256Mi"',
                     preview.stdout), describe(preview)
    lab.kubectl("patch", CONFIG, "default", "--type", "merge",
                "-p", json.dumps({"spec": {"mpsDaemon": {"resources": {"limits": {"memory": "256Mi"}}}}}))
    try:
        wait_for("mpsd crash-looping at 256Mi", lambda: crash_looping_at(mpsd_pod(lab), "256Mi"), timeout=180)
        proc = lab.playbook("playbooks/gpu_fractioning.yml", "--tags", "gpu_fractioning_verify",
                            extra_vars={"gpu_fractioning_mpsd_memory_limit": "256Mi", "gpu_fractioning_wait_timeout": 30})
    finally:
        lab.kubectl("patch", CONFIG, "default", "--type", "json", "-p", '[{"op": "remove", "path": "/spec/mpsDaemon"}]',
                    check=False)
    wait_for("mpsd back at 1Gi and ready", lambda: mpsd_memory_limit(mpsd_pod(lab)) == "1Gi" and all(
        s.get("ready") for s in mpsd_pod(lab)["status"].get("containerStatuses") or [{}]), timeout=180)
    assert proc.returncode != 0, describe(proc)
    out = " ".join(proc.stdout.split())   # the message as one line, however the callback wrapped it
    assert re.search(r"gpu-fractioning-mpsd: 0/1 ready", out), describe(proc)
    assert re.search(r"mpsd pod gpu-fractioning-mpsd-\S+ on \S+ exits with CUDA_ERROR_OUT_OF_MEMORY", out), \
        describe(proc)
    assert "raise mpsDaemon.resources.limits.memory (gpu_fractioning_mpsd_memory_limit" in out, describe(proc)
    assert "has 8 GPUs: at least 400 MiB" in out, describe(proc)

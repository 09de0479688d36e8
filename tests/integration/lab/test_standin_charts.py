"""The stand-in fork charts on the lab's node tier, the way a real cluster runs them:
the fork_images role builds and pushes the images, kubernetes.core.helm installs
the charts from the forks' pinned commits, the node pulls the images over TLS
with the pull secret and runs them. Then: the objects, conditions and log lines
the cluster roles check (lab/standin/charts/CONTRACT.md), the knobs that make a
stand-in misbehave, and the GpuFractioningConfig's finalizer with and without
its operator. One install, shared by the module's tests, in test order."""
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from lab_helpers import describe

pytestmark = [pytest.mark.lab, pytest.mark.second_lab, pytest.mark.lab_nodes, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
KAI_NS = "standin-kai"
FRAC_NS = "standin-gpu-fractioning"
GFC = "gpufractioningconfig.gpu-fractioning.kai.scheduler"
FINALIZER = "gpu-fractioning.nvidia.com/cleanup-node-conditions"
NODE_CONDITION = "gpu-fractioning.nvidia.com/Ready"
KAI_DEPLOYMENTS = {"binder": "binder", "admission": "admission", "pod-grouper": "podgrouper",
                   "podgroup-controller": "podgroupcontroller", "queue-controller": "queuecontroller",
                   "kai-scheduler-default": "scheduler", "kai-operator": "operator"}
KNOBS = ("-n", "smshare-lab", "configmap", "standin-knobs")


# --- helpers -----------------------------------------------------------------

def get(lab, *args):
    """kubectl get -o json, or None when absent."""
    proc = lab.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr or "not found" in proc.stderr or "doesn't have a resource type" in proc.stderr:
            return None
        raise AssertionError(proc.stderr)
    return json.loads(proc.stdout)


def wait_until(what, probe, timeout=120, interval=1):
    """probe() until it returns something truthy; fail naming `what` and the last value."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def when(value, test):
    """value if it is there and passes test, else None (for wait_until)."""
    return value if value and test(value) else None


def conditions(obj):
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def node_condition(lab):
    node = get(lab, "node", lab.kube_nodes[0])
    return conditions(node).get(NODE_CONDITION)


def set_knob(lab, key, value):
    """Set a stand-in knob; None removes it."""
    lab.kubectl("patch", *KNOBS, "--type", "merge", "-p", json.dumps({"data": {key: value}}))


def helm(lab, *args, check=False):
    return subprocess.run(["helm", *args], env=lab.env, text=True, capture_output=True, check=check)


def daemonset(lab, name):
    return get(lab, "-n", FRAC_NS, "daemonset", f"gpu-fractioning-{name}")


def ds_ready(lab, name):
    found = daemonset(lab, name)
    status = (found or {}).get("status") or {}
    return found if status.get("desiredNumberScheduled", 0) >= 1 \
        and status.get("numberReady") == status.get("desiredNumberScheduled") else None


def purge(lab):
    """The guide's uninstall and clean slate: config first (its operator must run),
    releases, then queues, CRDs and namespaces. Leaves the lab as it found it."""
    if get(lab, GFC, "default"):
        lab.kubectl("-n", FRAC_NS, "scale", "deploy/gpu-fractioning", "--replicas=1", check=False)
        if lab.kubectl("delete", GFC, "default", "--wait", "--timeout=90s", check=False).returncode != 0:
            lab.kubectl("patch", GFC, "default", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}',
                        check=False)
    for release, namespace in (("gpu-fractioning", FRAC_NS), ("kai-scheduler", KAI_NS)):
        helm(lab, "uninstall", release, "-n", namespace, "--ignore-not-found")
    for crd in lab.kubectl("get", "crd", "-o", "name").stdout.split():
        if crd.endswith((".kai.scheduler", ".scheduling.run.ai")):
            lab.kubectl("delete", crd, "--wait=false", check=False)
    lab.kubectl("delete", "namespace", KAI_NS, FRAC_NS, "kai-resource-reservation", "--ignore-not-found",
                "--wait", "--timeout=120s", check=False)


# --- the one install -----------------------------------------------------------

@pytest.fixture(scope="module")
def images(lab):
    """The fork_images role's build and push into the lab registry (a no-op when done)."""
    proc = lab.playbook("playbooks/images.yml")
    assert proc.returncode == 0, describe(proc)
    manifest = json.loads((lab.state_dir / "fork_images_manifest.json").read_text())
    # Keyed by repository: "<registry>/kai-scheduler/binder" -> digest.
    digests = {e["image"]: e["digest"] for e in manifest["images"]}
    return {"tag": manifest["images"][0]["tag"], "digests": digests,
            "registry": f"{lab.registry.address}/kai-fork"}


@pytest.fixture(scope="module")
def charts(lab, tmp_path_factory):
    """The guide's step 1: both forks cloned at their pinned commits (pull-request refs)."""
    forks = json.loads((lab.state_dir / "forks" / "forks.json").read_text())
    root = tmp_path_factory.mktemp("forks")
    paths = {}
    for name, fork in forks.items():
        work = root / name
        for argv in (["clone", "-q", fork["url"], str(work)],
                     ["-C", str(work), "fetch", "-q", "origin", fork["pr_ref"]],
                     ["-C", str(work), "checkout", "-q", fork["commit"]]):
            subprocess.run(["git", *argv], check=True, capture_output=True)
        paths[name] = work
    return {"kai": paths["kai_scheduler"] / "deployments" / "kai-scheduler",
            "fractioning": paths["gpu_fractioning"] / "operator" / "charts"}


@pytest.fixture(scope="module")
def installed(lab, images, charts):
    purge(lab)
    extra = {"standin_kai_chart": str(charts["kai"]), "standin_fractioning_chart": str(charts["fractioning"]),
             "standin_tag": images["tag"], "standin_kai_namespace": KAI_NS,
             "standin_fractioning_namespace": FRAC_NS}
    play = HERE / "playbooks" / "standin_charts.yml"
    started = time.monotonic()
    proc = lab.playbook(play, "--tags", "kai", extra_vars=extra)
    assert proc.returncode == 0, describe(proc)
    kai_config = wait_until("kai-config Available with DependenciesFulfilled reported", lambda: when(
        get(lab, "config.kai.scheduler", "kai-config"), lambda c: conditions(c).get("Available", {}).get("status")
        == "True" and "DependenciesFulfilled" in conditions(c)))
    kai_seconds = time.monotonic() - started
    proc = lab.playbook(play, "--tags", "fractioning", extra_vars=extra)
    assert proc.returncode == 0, describe(proc)
    wait_until("both DaemonSets ready", lambda: ds_ready(lab, "mpsd") and ds_ready(lab, "fractiond"))
    print(f"\n[standin charts] KAI installed and Available in {kai_seconds:.0f}s; "
          f"everything ready {time.monotonic() - started:.0f}s after the first helm install")
    yield {"kai_config_before": kai_config, "charts": charts, "extra": extra}
    purge(lab)


def pod_of(lab, namespace, selector):
    pods = get(lab, "-n", namespace, "pods", "-l", selector)["items"]
    assert pods, f"no pod with {selector} in {namespace}"
    return pods[0]


def image_digest(pod):
    return pod["status"]["containerStatuses"][0]["imageID"].rsplit("@", 1)[-1]


# --- KAI-Scheduler -------------------------------------------------------------

def test_kai_release_runs_every_service_from_the_fork_images(lab, installed, images):
    status = helm(lab, "status", "kai-scheduler", "-n", KAI_NS)
    assert "STATUS: deployed" in status.stdout, describe(status)
    found = {d["metadata"]["name"]: d for d in get(lab, "-n", KAI_NS, "deployments")["items"]}
    assert set(found) == set(KAI_DEPLOYMENTS)
    for name, image_name in KAI_DEPLOYMENTS.items():
        deploy = found[name]
        assert conditions(deploy)["Available"]["status"] == "True", name
        image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == f"{images['registry']}/kai-scheduler/{image_name}:{images['tag']}"
        pod = pod_of(lab, KAI_NS, f"app={name}")
        assert image_digest(pod) == images["digests"][image.rsplit(":", 1)[0]], name
        assert pod["spec"]["imagePullSecrets"] == [{"name": "lab-registry"}]


def test_kai_config_reports_the_missing_gpu_fractioning_config_until_it_exists(lab, installed):
    before = conditions(installed["kai_config_before"])
    missing = before["DependenciesFulfilled"]
    assert (missing["status"], missing["reason"]) == ("False", "dependencies_missing")
    assert "GpuFractioningConfig not found" in missing["message"]
    for ctype, reason in (("Deployed", "deployed"), ("Available", "available"), ("Ready", "ready")):
        assert (before[ctype]["status"], before[ctype]["reason"]) == ("True", reason), before[ctype]
    config = get(lab, "config.kai.scheduler", "kai-config")
    assert config["spec"]["global"]["gpuSharingMode"] == "NvFractions"
    assert config["spec"]["binder"]["resourceReservation"]["runtimeClassName"] == "nvidia"
    after = conditions(config)["DependenciesFulfilled"]
    assert (after["status"], after["reason"], after["message"]) == \
        ("True", "dependencies_fulfilled", "Dependencies are fulfilled")
    manifest = helm(lab, "get", "manifest", "kai-scheduler", "-n", KAI_NS).stdout
    assert "kind: Config\n" not in manifest, "kai-config comes from the hook, not the release"


def test_kai_chart_makes_the_default_queues_shard_and_reservation_namespace(lab, installed):
    queues = {q["metadata"]["name"]: q for q in get(lab, "queues.scheduling.run.ai")["items"]}
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert "default-parent-queue" in queues
    assert get(lab, "schedulingshards.kai.scheduler", "default")
    assert get(lab, "namespace", "kai-resource-reservation")
    assert get(lab, "runtimeclass", "nvidia")["handler"] == "nvidia"


def test_an_image_pulled_without_the_pull_secret_is_refused(lab, installed, images):
    image = f"{images['registry']}/kai-scheduler/operator:{images['tag']}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull-without-secret", "namespace": KAI_NS},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": image, "imagePullPolicy": "Always"}]}}
    lab.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
    try:
        waiting = wait_until("the pull to fail", lambda: (
            (get(lab, "-n", KAI_NS, "pod", "pull-without-secret")["status"].get("containerStatuses") or [{}])[0]
            .get("state", {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")), 60)
        assert waiting
        events = lab.kubectl("-n", KAI_NS, "get", "events", "--field-selector",
                             "involvedObject.name=pull-without-secret", "-o", "json").stdout
        assert "401 Unauthorized" in events or "unauthorized" in events.lower(), events[-2000:]
    finally:
        lab.kubectl("-n", KAI_NS, "delete", "pod", "pull-without-secret", "--wait=false", check=False)


def test_a_kai_service_that_never_gets_ready_makes_kai_config_unavailable(lab, installed):
    set_knob(lab, "kai-services.not-ready", "binder")
    try:
        wait_until("binder unavailable and kai-config Ready=False", lambda: (
            conditions(get(lab, "-n", KAI_NS, "deployment", "binder"))["Available"]["status"] == "False"
            and conditions(get(lab, "config.kai.scheduler", "kai-config"))["Ready"]["reason"] == "not_ready"), 60)
        config = conditions(get(lab, "config.kai.scheduler", "kai-config"))
        assert (config["Available"]["status"], config["Available"]["message"]) == ("False", "System not available")
    finally:
        set_knob(lab, "kai-services.not-ready", None)
    wait_until("kai-config Ready again", lambda: conditions(
        get(lab, "config.kai.scheduler", "kai-config"))["Ready"]["status"] == "True", 60)


# --- gpu-fractioning ---------------------------------------------------------------

def test_operator_creates_the_daemonsets_on_gpu_nodes_from_the_fork_images(lab, installed, images):
    repo = f"{images['registry']}/kai-gpu-fractioning"
    mpsd, fractiond = ds_ready(lab, "mpsd"), ds_ready(lab, "fractiond")
    for ds, component in ((mpsd, "mpsd"), (fractiond, "fractiond")):
        labels = ds["spec"]["template"]["metadata"]["labels"]
        assert labels == {"app.kubernetes.io/managed-by": "gpu-fractioning", "app.kubernetes.io/component": component}
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.client": "true"}
        assert ds["metadata"]["ownerReferences"][0]["kind"] == "GpuFractioningConfig"
        assert pod["serviceAccountName"] == "gpu-fractioning-daemon"
    assert [c["image"] for c in fractiond["spec"]["template"]["spec"]["containers"]] == \
        [f"{repo}/fractiond:{images['tag']}", f"{repo}/metricsd:{images['tag']}"]
    assert mpsd["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    pod = pod_of(lab, FRAC_NS, "app.kubernetes.io/component=mpsd")
    assert image_digest(pod) == images["digests"][f"{repo}/mpsd"]
    two = pod_of(lab, FRAC_NS, "app.kubernetes.io/component=fractiond")
    assert [s["ready"] for s in two["status"]["containerStatuses"]] == [True, True]
    operator = pod_of(lab, FRAC_NS, "app.kubernetes.io/name=gpu-fractioning")
    assert image_digest(operator) == images["digests"][f"{repo}/operator"]


def test_config_and_node_report_ready(lab, installed):
    config = get(lab, GFC, "default")
    assert FINALIZER in config["metadata"]["finalizers"]
    found = conditions(config)
    assert {t: (c["status"], c["reason"]) for t, c in found.items()} == {
        "FractiondReady": ("True", "AllPodsReady"), "MpsdReady": ("True", "AllPodsReady"),
        "Ready": ("True", "AllComponentsReady"), "DriverUpgradeInProgress": ("False", "NoDriverUpgrade")}
    assert found["MpsdReady"]["message"] == "1 of 1 pods ready"
    node = node_condition(lab)
    assert (node["status"], node["reason"], node["message"]) == \
        ("True", "AllDaemonsReady", "all gpu-fractioning daemons are running")


def test_mpsd_logs_the_multiuser_server_and_the_default_cap(lab, installed):
    logs = lab.kubectl("-n", FRAC_NS, "logs", "ds/gpu-fractioning-mpsd").stdout
    assert "Adding server 'shared' [multiuser enabled]" in logs, logs
    assert "Namespace 'default' on server 'shared': active thread percentage 10" in logs, logs
    # mpsd's own lines, as the fork's slog JSON handler writes them.
    records = {r["msg"]: r for r in (json.loads(line) for line in logs.splitlines() if line.startswith("{"))}
    assert records["starting MPS daemon"]["args"] == ["-p", "3", "-m", "-f", "-a", "/etc/nvidia-mps/mps-control.toml"]
    cap = records["capped the default MPS namespace as defence in depth"]
    assert (cap["server"], cap["namespace"], cap["activeThreadPercent"]) == ("shared", "default", 10)
    assert records["starting mpsd"]["controlPort"] == "3"
    container = daemonset(lab, "mpsd")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"memory": "1Gi"}
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi", "ephemeral-storage": "100Mi"}
    fractiond_log = lab.kubectl("-n", FRAC_NS, "logs", "ds/gpu-fractioning-fractiond", "-c", "fractiond").stdout
    assert '"msg":"configured NRI plugin"' in fractiond_log, fractiond_log
    pod = pod_of(lab, FRAC_NS, "app.kubernetes.io/component=mpsd")
    container = pod["status"]["containerStatuses"][0]["containerID"].split("//", 1)[1]
    runtime_log = Path(lab_node_facts(lab)["runtime_log"]).read_text()
    assert f" create {container} " in runtime_log, "mpsd did not run through the nvidia runtime handler"
    # The guide's check 3 runs in the mpsd pod (issue 9 parses it).
    proc = lab.kubectl("-n", FRAC_NS, "exec", "ds/gpu-fractioning-mpsd", "--", "nvidia-cuda-mps-control", "-p", "3",
                       "namespace", "list", "--server=shared", check=False)
    assert proc.returncode == 0 and "default" in proc.stdout, describe(proc)


def lab_node_facts(lab):
    text = (lab.state_dir / "inventory" / "group_vars" / "smshare_lab" / "lab.yml").read_text()
    return yaml.safe_load(text)["smshare_lab_node_tier"]


def test_a_daemonset_that_never_gets_ready_is_reported_on_config_and_node(lab, installed):
    set_knob(lab, "mpsd.not-ready", "true")
    try:
        lab.kubectl("-n", FRAC_NS, "delete", "pod", "-l", "app.kubernetes.io/component=mpsd", "--wait=false")
        wait_until("MpsdReady=False", lambda: conditions(get(lab, GFC, "default"))
                   .get("MpsdReady", {}).get("reason") == "RolloutInProgress", 60)
        found = conditions(get(lab, GFC, "default"))
        assert (found["Ready"]["status"], found["Ready"]["reason"], found["Ready"]["message"]) == \
            ("False", "ComponentNotReady", "not ready: MpsdReady")
        assert found["MpsdReady"]["message"] == "0 of 1 pods ready"
        node = wait_until("the node condition False", lambda: when(
            node_condition(lab), lambda c: c["status"] == "False"), 30)
        assert node["message"] == f"mpsd pod is not ready: {node['reason']}"
        pod = wait_until("the new mpsd pod running", lambda: [
            p["metadata"]["name"] for p in get(lab, "-n", FRAC_NS, "pods", "-l", "app.kubernetes.io/component=mpsd")
            ["items"] if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"], 120)[0]
        logs = wait_until("its log", lambda: lab.kubectl("-n", FRAC_NS, "logs", pod, check=False).stdout, 60)
        assert "not starting the MPS control daemon" in logs, logs
    finally:
        set_knob(lab, "mpsd.not-ready", None)
    lab.kubectl("-n", FRAC_NS, "delete", "pod", "-l", "app.kubernetes.io/component=mpsd", "--wait=false")
    wait_until("mpsd ready again", lambda: node_condition(lab) and node_condition(lab)["status"] == "True", 90)


def test_deleting_the_config_stops_the_daemonsets_and_clears_nodes_before_the_finalizer(lab, installed):
    proc = lab.kubectl("delete", GFC, "default", "--wait", "--timeout=120s", check=False)
    assert proc.returncode == 0, describe(proc)
    assert daemonset(lab, "mpsd") is None and daemonset(lab, "fractiond") is None
    assert not get(lab, "-n", FRAC_NS, "pods", "-l", "app.kubernetes.io/managed-by=gpu-fractioning")["items"]
    assert node_condition(lab) is None
    logs = lab.kubectl("-n", FRAC_NS, "logs", "deploy/gpu-fractioning").stdout
    assert logs.index("daemonset deleted") < logs.index("removed node conditions and finalizer")
    wait_until("kai-config missing its dependency again", lambda: conditions(
        get(lab, "config.kai.scheduler", "kai-config"))["DependenciesFulfilled"]["status"] == "False", 30)


def test_without_its_operator_the_config_keeps_its_finalizer(lab, installed):
    hooks = helm(lab, "get", "hooks", "gpu-fractioning", "-n", FRAC_NS, check=True).stdout
    lab.kubectl("apply", "-f", "-", input_text=hooks)
    wait_until("the DaemonSets back", lambda: ds_ready(lab, "mpsd") and ds_ready(lab, "fractiond"), 90)
    wait_until("the node condition True", lambda: (node_condition(lab) or {}).get("status") == "True", 30)
    lab.kubectl("-n", FRAC_NS, "scale", "deploy/gpu-fractioning", "--replicas=0")
    node = wait_until("the node condition Unknown", lambda: when(
        node_condition(lab), lambda c: c["status"] == "Unknown"), 60)
    assert node["reason"] == "ControllerUnavailable"
    lab.kubectl("delete", GFC, "default", "--wait=false")
    time.sleep(5)
    stuck = get(lab, GFC, "default")
    assert stuck["metadata"].get("deletionTimestamp") and stuck["metadata"]["finalizers"] == [FINALIZER]
    assert daemonset(lab, "mpsd"), "without the operator nothing stops the DaemonSets"
    lab.kubectl("patch", GFC, "default", "--type", "json",
                "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
    wait_until("the config gone once its finalizer is removed", lambda: get(lab, GFC, "default") is None, 30)

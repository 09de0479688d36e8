"""The stand-in controllers' decisions, without a cluster: which objects they
build and which conditions they report (lab/standin/charts/CONTRACT.md)."""
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "lab" / "standin" / "controllers"))

from standin import fractioning, kai  # noqa: E402

IMAGE = {"name": "binder", "repository": "reg:5000/kai-fork/kai-scheduler", "tag": "smshare-1", "pullPolicy": "Always"}


def kai_spec(**enabled):
    blocks = {"binder": True, "admission": True, "podGrouper": True, "podGroupController": True,
              "queueController": True, "nodeScaleAdjuster": False, "scheduler": True}
    blocks.update(enabled)
    spec = {block: {"service": {"enabled": on, "image": dict(IMAGE)}} for block, on in blocks.items()}
    spec["global"] = {"additionalImagePullSecrets": ["lab-registry"], "gpuSharingMode": "NvFractions"}
    return spec


def test_kai_operator_deploys_enabled_services_and_one_scheduler_per_shard():
    shards = [{"metadata": {"name": "default"}}, {"metadata": {"name": "gpu"}}]
    wanted = kai.desired_deployments(kai_spec(admission=False), shards)
    assert sorted(wanted) == ["binder", "kai-scheduler-default", "kai-scheduler-gpu", "pod-grouper",
                              "podgroup-controller", "queue-controller"]
    assert "node-scale-adjuster" in kai.desired_deployments(kai_spec(nodeScaleAdjuster=True), shards)


def test_kai_service_deployment_takes_image_and_pull_secrets_from_kai_config():
    body = kai.deployment("binder", "kai", {"image": IMAGE}, kai_spec())
    pod = body["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "reg:5000/kai-fork/kai-scheduler/binder:smshare-1"
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "lab-registry"}]
    assert pod["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert body["metadata"]["labels"]["app"] == "binder"


@pytest.mark.parametrize("deployed, available, missing, expected", [
    (True, True, [("binder", "GpuFractioningConfig not found")], {
        "Deployed": ("True", "deployed", "Resources deployed"),
        "Available": ("True", "available", "System available"),
        "DependenciesFulfilled": ("False", "dependencies_missing", "\nbinder is missing GpuFractioningConfig not found"),
        "Ready": ("True", "ready", "System is ready"),
        "Reconciling": ("False", "reconciled", "Reconciliation completed successfully")}),
    (False, False, [], {
        "Deployed": ("False", "deployed", "Resources not deployed yet"),
        "Available": ("False", "available", "System not available"),
        "DependenciesFulfilled": ("True", "dependencies_fulfilled", "Dependencies are fulfilled"),
        "Ready": ("False", "not_ready", "System not ready"),
        "Reconciling": ("False", "reconciled", "Reconciliation completed successfully")}),
], ids=["missing-dependency", "not-deployed"])
def test_kai_config_conditions_are_upstreams(deployed, available, missing, expected):
    config = {"metadata": {"generation": 3}, "status": {}}
    found = kai.kai_conditions(config, deployed, available, missing)
    assert {c["type"]: (c["status"], c["reason"], c["message"]) for c in found} == expected
    assert all(c["observedGeneration"] == 3 for c in found)


def gfc(**spec):
    base = {"nodeSelector": {"nvidia.com/gpu.present": "true"}, "metricsAgent": {"enabled": True},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    base.update(spec)
    return {"metadata": {"name": "default", "uid": "u-1", "generation": 1}, "spec": base}


@pytest.fixture
def images(monkeypatch):
    for name in ("MPSD", "FRACTIOND", "METRICSD"):
        monkeypatch.setenv(f"{name}_IMAGE_REPOSITORY", f"reg/kai-gpu-fractioning/{name.lower()}")
        monkeypatch.setenv(f"{name}_IMAGE_TAG", "t1")
    monkeypatch.setenv("DAEMON_SERVICE_ACCOUNT_NAME", "gpu-fractioning-daemon")


def test_daemonsets_target_gpu_client_nodes_outside_driver_upgrades(images):
    ds = fractioning.mpsd_daemonset("gf", gfc(), "")
    assert ds["metadata"]["name"] == "gpu-fractioning-mpsd"
    assert ds["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.client": "true"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["operator"] for t in terms] == ["DoesNotExist", "In"]
    assert pod["runtimeClassName"] == "nvidia" and pod["hostPID"] is True
    assert pod["containers"][0]["image"] == "reg/kai-gpu-fractioning/mpsd:t1"
    assert pod["containers"][0]["readinessProbe"]["exec"]["command"] == ["test", "-S", "/run/nvidia-mps/control"]
    assert pod["volumes"][0]["hostPath"]["path"] == "/run/nvidia-mps"


def test_fractiond_carries_metricsd_and_the_configured_sockets(images):
    ds = fractioning.fractiond_daemonset("gf", gfc(fractioningAgent={
        "nriSocketPath": "/var/snap/microk8s/common/run/nri.sock",
        "criSocketPath": "/opt/kai-runtime/containerd.sock"}), "/lab/host")
    pod = ds["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["fractiond", "metricsd"]
    assert "--nri-socket=/var/snap/microk8s/common/run/nri.sock" in pod["containers"][0]["args"]
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert paths["nri-socket"] == "/lab/host/var/snap/microk8s/common/run"
    assert paths["cri-socket"] == "/lab/host/opt/kai-runtime"
    assert pod["runtimeClassName"] == "nvidia"


def test_without_metricsd_fractiond_runs_alone_on_the_default_runtime(images):
    pod = fractioning.fractiond_daemonset("gf", gfc(metricsAgent={"enabled": False}), "")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["fractiond"]
    assert "runtimeClassName" not in pod


@pytest.mark.parametrize("value, expected", [(None, "nvidia"), ("", None), ("custom", "custom")])
def test_runtime_class_defaults_to_nvidia_and_empty_means_none(value, expected):
    spec = {} if value is None else {"runtimeClassName": value}
    assert fractioning.runtime_class(spec) == expected


@pytest.mark.parametrize("desired, ready, expected", [
    (0, 0, ("True", "NoTargetNodes", "no target nodes found")),
    (2, 2, ("True", "AllPodsReady", "2 of 2 pods ready")),
    (2, 1, ("False", "PartiallyAvailable", "1 of 2 pods ready")),
    (2, 0, ("False", "RolloutInProgress", "0 of 2 pods ready")),
])
def test_daemon_conditions(desired, ready, expected):
    found = fractioning.daemon_condition("mpsd", desired, ready, 1, [])
    assert found["type"] == "MpsdReady"
    assert (found["status"], found["reason"], found["message"]) == expected


def test_ready_names_the_components_that_are_not():
    parts = [fractioning.daemon_condition("fractiond", 1, 1, 1, []), fractioning.daemon_condition("mpsd", 1, 0, 1, [])]
    found = fractioning.ready_condition(parts, 1, [])
    assert (found["status"], found["reason"], found["message"]) == ("False", "ComponentNotReady", "not ready: MpsdReady")
    parts[1] = fractioning.daemon_condition("mpsd", 1, 1, 1, [])
    assert fractioning.ready_condition(parts, 1, [])["reason"] == "AllComponentsReady"


@pytest.mark.parametrize("status, reason", [
    ({"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}]},
     "ImagePullBackOff"),
    ({"phase": "Pending"}, "Pending"),
    ({"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}, "NotReady"),
])
def test_node_condition_reason_is_the_pods_failure(status, reason):
    assert fractioning.pod_failure_reason({"status": status}) == reason


def test_condition_keeps_transition_time_while_status_holds_and_leaves_out_an_empty_message():
    old = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    from standin.kube import condition, same_conditions
    kept = condition("Ready", "True", "AllComponentsReady", "", 1, old)
    assert kept["lastTransitionTime"] == "2026-01-01T00:00:00Z" and "message" not in kept
    assert condition("Ready", "False", "ComponentNotReady", "x", 1, old)["lastTransitionTime"] != \
        "2026-01-01T00:00:00Z"
    assert same_conditions([dict(kept, message="")], [kept])


def test_hook_applier_refuses_anything_but_a_kai_config(tmp_path, capsys):
    manifest = tmp_path / "other.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
    with pytest.raises(SystemExit):
        kai.kai_config_deployer(["-f", str(manifest)])
    assert "is not a kai.scheduler/v1 Config" in capsys.readouterr().err

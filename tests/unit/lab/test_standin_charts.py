"""The stand-in fork charts rendered with Helm's own engine (helm-python-sdk), no
cluster: the values keys, defaults and refusals the cluster roles rely on
(lab/standin/charts/CONTRACT.md)."""
import shutil
from pathlib import Path

import pytest
import yaml

helm_python = pytest.importorskip("helm_python")

FORKS = Path(__file__).resolve().parents[3] / "lab" / "standin" / "forks"
KAI = FORKS / "kai-scheduler" / "deployments"
FRACTIONING = FORKS / "gpu-fractioning" / "operator" / "charts"
GUIDE_KAI = {"global": {"gpuSharingMode": "NvFractions", "registry": "reg:5000/team/kai-scheduler",
                        "tag": "smshare-44d1d0a-af0544e", "imagePullSecrets": [{"name": "pull"}]},
             "binder": {"runtimeClassName": "nvidia"}}


@pytest.fixture(scope="module")
def kai_chart(tmp_path_factory):
    """The KAI chart after `helm dependency build` (in a copy: the source stays clean)."""
    root = tmp_path_factory.mktemp("kai") / "deployments"
    shutil.copytree(KAI, root)
    chart = root / "kai-scheduler"
    helm_python.dependency_build(str(chart))
    return chart


def render(chart, values):
    with helm_python.Chart.load(str(chart)) as loaded:
        out = loaded.render(values, name=chart.name if chart.name != "charts" else "gpu-fractioning",
                            namespace="ns", is_install=True)
    objects = []
    for text in out.values():
        objects += [d for d in yaml.safe_load_all(text) if d]
    return objects


def find(objects, kind, name):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert found, f"no {kind} {name}"
    return found[0]


def test_kai_config_carries_the_guides_values(kai_chart):
    objects = render(kai_chart, GUIDE_KAI)
    hook = find(objects, "ConfigMap", "kai-config-manifest")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    config = yaml.safe_load(hook["data"]["kai-config.yaml"])
    assert (config["apiVersion"], config["kind"]) == ("kai.scheduler/v1", "Config")
    assert config["metadata"]["name"] == "kai-config"
    assert config["spec"]["global"]["gpuSharingMode"] == "NvFractions"
    assert config["spec"]["global"]["additionalImagePullSecrets"] == ["pull"]
    assert config["spec"]["binder"]["resourceReservation"]["runtimeClassName"] == "nvidia"
    assert config["spec"]["binder"]["service"]["image"] == {
        "name": "binder", "repository": "reg:5000/team/kai-scheduler", "tag": "smshare-44d1d0a-af0544e",
        "pullPolicy": "IfNotPresent"}
    operator = find(objects, "Deployment", "kai-operator")["spec"]["template"]["spec"]
    assert operator["containers"][0]["image"] == "reg:5000/team/kai-scheduler/operator:smshare-44d1d0a-af0544e"
    assert operator["imagePullSecrets"] == [{"name": "pull"}]
    job = find(objects, "Job", "kai-config-deployer")["spec"]["template"]["spec"]
    assert job["containers"][0]["image"] == "reg:5000/team/kai-scheduler/helm-hooks:smshare-44d1d0a-af0544e"
    assert not [o for o in objects if o["metadata"]["name"].endswith("-gpu-fractioning")]


def test_kai_chart_defaults_and_the_upstream_subchart(kai_chart):
    objects = render(kai_chart, {"global": {"nvFractions": {"set": True}}})
    operator = find(objects, "Deployment", "kai-operator")["spec"]["template"]["spec"]
    assert operator["containers"][0]["image"] == "registry/local/kai-scheduler/operator:0.0.0"
    upstream = find(objects, "Deployment", "kai-scheduler-gpu-fractioning")["spec"]["template"]["spec"]
    assert upstream["containers"][0]["image"] == "ghcr.io/kai-scheduler/gpu-fractioning/operator:0.1.0"
    queues = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Queue"}
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "PriorityClass"} == \
        {"build", "build-preemptible", "train", "inference"}


@pytest.mark.parametrize("mode", ["nvfractions", "NVFRACTIONS", "MPS", ""])
def test_kai_chart_refuses_a_sharing_mode_outside_the_enum(kai_chart, mode):
    with pytest.raises(helm_python.HelmRenderError) as error:
        render(kai_chart, {"global": {"gpuSharingMode": mode}})
    assert "global.gpuSharingMode must be one of Disabled, NonMemoryEnforced, HamiCore, NvFractions " \
           f'(case-sensitive), got "{mode}"' in str(error.value)


def test_kai_chart_declares_the_subchart_helm_dependency_build_resolves():
    chart = yaml.safe_load((KAI / "kai-scheduler" / "Chart.yaml").read_text())
    assert chart["name"] == "kai-scheduler"
    assert chart["dependencies"] == [{"name": "gpu-fractioning", "version": "0.1.0",
                                      "repository": "file://../upstream-charts/gpu-fractioning",
                                      "condition": "global.nvFractions.set"}]


def test_gpu_fractioning_images_fall_back_to_app_version_when_the_tag_is_empty():
    objects = render(FRACTIONING, {"images": {"operator": {"repository": "reg/op", "tag": ""}}})
    manager = find(objects, "Deployment", "gpu-fractioning")["spec"]["template"]["spec"]["containers"][0]
    assert manager["image"] == "reg/op:0.1.0"
    env = {e["name"]: e.get("value") for e in manager["env"]}
    assert env["MPSD_IMAGE_REPOSITORY"] == "ghcr.io/kai-scheduler/gpu-fractioning/mpsd"
    assert env["MPSD_IMAGE_TAG"] == "0.1.0"


def test_gpu_fractioning_takes_the_guides_values():
    values = {"images": {name: {"repository": f"reg/kai-gpu-fractioning/{name}", "tag": "t1"}
                         for name in ("operator", "fractiond", "metricsd", "mpsd")},
              "imagePullSecrets": [{"name": "pull"}],
              "fractioningAgent": {"criSocketPath": "/opt/kai-runtime/containerd.sock",
                                   "nriSocketPath": "/var/snap/microk8s/common/run/nri.sock"}}
    objects = render(FRACTIONING, values)
    manager = find(objects, "Deployment", "gpu-fractioning")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in manager["containers"][0]["env"]}
    assert [env[f"{n}_IMAGE_TAG"] for n in ("FRACTIOND", "METRICSD", "MPSD")] == ["t1", "t1", "t1"]
    assert env["DAEMON_SERVICE_ACCOUNT_NAME"] == "gpu-fractioning-daemon"
    assert manager["imagePullSecrets"] == [{"name": "pull"}]
    assert find(objects, "ServiceAccount", "gpu-fractioning-daemon")["imagePullSecrets"] == [{"name": "pull"}]
    config = find(objects, "GpuFractioningConfig", "default")
    assert config["apiVersion"] == "gpu-fractioning.kai.scheduler/v1alpha1"
    assert config["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert config["spec"]["fractioningAgent"] == values["fractioningAgent"]
    assert config["spec"]["runtimeClassName"] == "nvidia"


def test_gpu_fractioning_crd_is_the_upstream_kind():
    crd = yaml.safe_load(next(FRACTIONING.glob("crds/*.yaml")).read_text())
    assert crd["metadata"]["name"] == "gpufractioningconfigs.gpu-fractioning.kai.scheduler"
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["scope"]) == \
        ("gpu-fractioning.kai.scheduler", "GpuFractioningConfig", "Cluster")
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]

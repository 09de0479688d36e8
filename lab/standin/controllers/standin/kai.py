"""STAND-IN (lab only): the KAI-Scheduler fork's operator, services and kai-config hook.

The operator reads Config `kai-config` (kai.scheduler/v1) and deploys one
Deployment per enabled service with the image kai-config names, then reports
upstream's conditions (Deployed, Available, DependenciesFulfilled, Ready,
Reconciling) with their reasons and messages. lab/standin/charts/CONTRACT.md.
"""
import hashlib
import json
import os
import re
import sys

from .kube import ApiError, Kube, Stop, condition, fail, knobs, log, same_conditions, serve_health

CONFIG = "/apis/kai.scheduler/v1/configs/kai-config"
SHARDS = "/apis/kai.scheduler/v1/schedulingshards"
GPU_FRACTIONING_CONFIG = "/apis/gpu-fractioning.kai.scheduler/v1alpha1/gpufractioningconfigs/default"
MANAGER = "kai-operator"
# kai-config block -> Deployment name (the scheduler's: one per SchedulingShard).
SERVICES = {"binder": "binder", "admission": "admission", "podGrouper": "pod-grouper",
            "podGroupController": "podgroup-controller", "queueController": "queue-controller",
            "nodeScaleAdjuster": "node-scale-adjuster"}
HEALTH_PORT = 8081


def desired_deployments(spec, shards):
    """{deployment name: its service block} for every enabled service."""
    wanted = {}
    for block, name in SERVICES.items():
        service = (spec.get(block) or {}).get("service") or {}
        if service.get("enabled"):
            wanted[name] = service
    scheduler = (spec.get("scheduler") or {}).get("service") or {}
    if scheduler.get("enabled"):
        for shard in shards:
            wanted[f"kai-scheduler-{shard['metadata']['name']}"] = scheduler
    return wanted


def deployment(name, namespace, service, spec):
    image = service.get("image") or {}
    glob = spec.get("global") or {}
    pod = {
        "serviceAccountName": name,
        "containers": [{
            "name": name,
            "image": f"{image.get('repository')}/{image.get('name')}:{image.get('tag')}",
            "imagePullPolicy": image.get("pullPolicy") or "IfNotPresent",
            "args": [f"--service={name}"],
            "env": [{"name": "STANDIN_DEPLOYMENT", "value": name},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
            "ports": [{"name": "probe", "containerPort": HEALTH_PORT}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": HEALTH_PORT},
                               "initialDelaySeconds": 1, "periodSeconds": 2},
        }],
    }
    if glob.get("additionalImagePullSecrets"):
        pod["imagePullSecrets"] = [{"name": s} for s in glob["additionalImagePullSecrets"]]
    for key in ("nodeSelector", "tolerations"):
        if glob.get(key):
            pod[key] = glob[key]
    labels = {"app": name, "app.kubernetes.io/managed-by": MANAGER}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def available(found):
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (found.get("status") or {}).get("conditions") or [])


def kai_conditions(config, deployed, is_available, missing):
    gen = config["metadata"].get("generation")
    old = (config.get("status") or {}).get("conditions") or []
    out = [
        condition("Deployed", "True" if deployed else "False", "deployed",
                  "Resources deployed" if deployed else "Resources not deployed yet", gen, old),
        condition("Available", "True" if is_available else "False", "available",
                  "System available" if is_available else "System not available", gen, old),
    ]
    if missing:
        out.append(condition("DependenciesFulfilled", "False", "dependencies_missing",
                             "".join(f"\n{operand} is missing {what}" for operand, what in missing), gen, old))
    else:
        out.append(condition("DependenciesFulfilled", "True", "dependencies_fulfilled",
                             "Dependencies are fulfilled", gen, old))
    out.append(condition("Ready", "True" if is_available else "False", "ready" if is_available else "not_ready",
                         "System is ready" if is_available else "System not ready", gen, old))
    out.append(condition("Reconciling", "False", "reconciled", "Reconciliation completed successfully", gen, old))
    return out


def operator():
    kube, stop = Kube(), Stop()
    serve_health(HEALTH_PORT)
    log("starting KAI operator (stand-in)", namespace=kube.namespace())
    applied = {}   # (kind, namespace, name) -> digest of what we last applied
    while stop.sleep(1):
        try:
            reconcile(kube, applied)
        except (ApiError, OSError) as exc:
            log("reconcile failed, retrying", error=str(exc))
    log("KAI operator stopped")


def reconcile(kube, applied):
    if knobs(kube).get("kai-operator.paused") == "true":
        return
    config = kube.get(CONFIG)
    if not config:
        return
    spec = config.get("spec") or {}
    namespace = spec.get("namespace") or kube.namespace()
    wanted = desired_deployments(spec, kube.list(SHARDS))
    current = {d["metadata"]["name"]: d for d in
               kube.list(f"/apis/apps/v1/namespaces/{namespace}/deployments",
                         f"app.kubernetes.io/managed-by={MANAGER}")}
    accounts = {a["metadata"]["name"] for a in kube.list(f"/api/v1/namespaces/{namespace}/serviceaccounts")}
    for name, service in sorted(wanted.items()):
        if name not in accounts:
            kube.apply(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
                       {"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": name, "namespace": namespace,
                                     "labels": {"app.kubernetes.io/managed-by": MANAGER}}}, MANAGER)
        body = deployment(name, namespace, service, spec)
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if name not in current or applied.get(name) != digest:
            kube.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}", body, MANAGER)
            applied[name] = digest
            log("deployment applied", name=name, image=body["spec"]["template"]["spec"]["containers"][0]["image"])
    for name in sorted(set(current) - set(wanted)):
        kube.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        applied.pop(name, None)
        log("deployment removed", name=name)
    current = {d["metadata"]["name"]: d for d in
               kube.list(f"/apis/apps/v1/namespaces/{namespace}/deployments",
                         f"app.kubernetes.io/managed-by={MANAGER}")}
    deployed = all(name in current for name in wanted)
    is_available = deployed and all(available(current[name]) for name in wanted)
    missing = []
    if (spec.get("global") or {}).get("gpuSharingMode") == "NvFractions" and not kube.get(GPU_FRACTIONING_CONFIG):
        missing.append(("binder", "GpuFractioningConfig not found"))
    new = kai_conditions(config, deployed, is_available, missing)
    if not same_conditions((config.get("status") or {}).get("conditions"), new):
        kube.merge_patch(CONFIG + "/status", {"status": {"conditions": new}})
        log("kai-config status updated", conditions={c["type"]: c["status"] for c in new})


def service(name):
    """A KAI service: healthy, ready unless the knob kai-services.not-ready names its Deployment."""
    kube, stop = Kube(), Stop()
    deployment_name = os.environ.get("STANDIN_DEPLOYMENT", name)
    state = {"ready": True}
    serve_health(HEALTH_PORT, ready=lambda: state["ready"])
    log(f"{name} (stand-in) started", deployment=deployment_name)
    while stop.sleep(1):
        listed = knobs(kube).get("kai-services.not-ready", "").split()
        ready = deployment_name not in listed
        if ready != state["ready"]:
            log("readiness changed by the lab's knob", ready=ready)
        state["ready"] = ready


def resource_reservation():
    """KAI's GPU reservation pod: loads NVML (the driver the nvidia runtime mounts),
    finds the GPU the device plugin gave it and writes that GPU's UUID on itself
    (annotation run.ai/reserve_for_gpu_index), then holds the GPU. Without the
    nvidia runtime there is no driver: it fails, as the real one does."""
    kube, stop = Kube(), Stop()
    name, namespace = os.environ.get("POD_NAME", ""), os.environ.get("POD_NAMESPACE", "")
    try:
        with open("/run/nvidia-standin/device.json") as handle:
            device = json.load(handle)
    except (OSError, ValueError):
        log("failed to initialize NVML: could not load NVML library libnvidia-ml.so.1 "
            "(is the pod running with the nvidia RuntimeClass?)")
        return 1
    known = {gpu["uuid"] for gpu in device.get("gpus") or []}
    visible = [u for u in os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if u in known]
    if not visible:
        log("no GPU device visible to the reservation pod", visible=os.environ.get("NVIDIA_VISIBLE_DEVICES", ""))
        return 1
    try:
        kube.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{name}",
                         {"metadata": {"annotations": {"run.ai/reserve_for_gpu_index": visible[0]}}})
    except (ApiError, OSError) as exc:
        log("failed to patch the pod with its GPU", error=str(exc))
        return 1
    log("Pod was updated with GPU device UUID", uuid=visible[0])
    while stop.sleep(3600):
        pass
    return 0


def idle(name):
    stop = Stop()
    log(f"{name} (stand-in) started; it has nothing to do in the lab")
    while stop.sleep(3600):
        pass


def kai_config_deployer(argv):
    """`kubectl apply --server-side` of one manifest file (the hook's job), for the
    chart's kai-config: the text is sent as is (apply takes YAML)."""
    manager, force, path = "kai-config-deployer", False, None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("--field-manager="):
            manager = arg.split("=", 1)[1]
        elif arg == "--force-conflicts":
            force = True
        elif arg == "-f" and args:
            path = args.pop(0)
        else:
            fail(f"kai-config-deployer (stand-in): unknown argument {arg}")
    if not path:
        fail("kai-config-deployer (stand-in): -f FILE is required")
    with open(path) as handle:
        text = handle.read()
    api = re.search(r"^apiVersion:\s*(\S+)", text, re.M)
    kind = re.search(r"^kind:\s*(\S+)", text, re.M)
    name = re.search(r"^metadata:\s*\n(?:\s+.*\n)*?\s+name:\s*(\S+)", text, re.M)
    if not (api and kind and name) or (api.group(1), kind.group(1)) != ("kai.scheduler/v1", "Config"):
        fail(f"kai-config-deployer (stand-in): {path} is not a kai.scheduler/v1 Config")
    kube = Kube()
    try:
        kube.apply(f"/apis/kai.scheduler/v1/configs/{name.group(1)}", text, manager, force)
    except (ApiError, OSError) as exc:
        fail(f"error: {exc}")
    print(f"config.kai.scheduler/{name.group(1)} serverside-applied", flush=True)


def main(image, argv):
    if image == "operator":
        operator()
    elif image == "scheduler":
        from .scheduler import main as scheduler_main  # lab/standin/controllers/standin/scheduler.py
        return scheduler_main()
    elif image in ("podgrouper", "binder", "admission", "queuecontroller", "podgroupcontroller",
                   "nodescaleadjuster"):
        service(image)
    elif image == "helm-hooks":
        if argv[:1] == ["kai-config-deployer"]:
            kai_config_deployer(argv[1:])
        else:
            fail("helm-hooks (stand-in): usage: kai-config-deployer [--field-manager=M] [--force-conflicts] -f FILE")
    elif image == "resourcereservation":
        return resource_reservation()
    else:
        idle(image)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))

# Apache-2.0
"""One table of Kubernetes objects with the verdicts the fractional-pod rules give them, read
by the linter's tests (test_workload_case_table.py: workload_rules.lint) and the admission
policy's (test_admission_policy.py: every CEL expression of the generated policy, evaluated
with cel-expr-python). A verdict is the set of (rule, severity) an object breaks, judged alone:
no queue tree and no sharing mode, which is what admission sees (workload_rules.NEEDS).

Every object is one the API server would take as sent (typed fields, string annotations) and
of a kind the policy matches; none carries status or metadata.uid (the linter reads those as a
dump of live pods). The shapes are the KAI docs' and upstream examples', as in
test_workload_rules.py and test_workload_rules_kinds.py; each case says what it shows.

    for case in CASES: case.id, case.obj, case.expected (frozenset), case.controlled
"""
import copy
from collections import namedtuple

Case = namedtuple("Case", "id obj expected controlled")

E, W = "error", "warning"
NONROOT = {"runAsNonRoot": True, "runAsUser": 1000}
QUEUE = {"kai.scheduler/queue": "ml-team"}
HALF = {"gpu-fraction": "0.5"}


def template(annotations=None, labels=None, scheduler="kai-scheduler", containers=None, security="nonroot",
             init=None):
    spec = {"containers": copy.deepcopy(containers) if containers is not None
            else [{"name": "gpu-workload", "image": "cuda"}]}
    if init is not None:
        spec["initContainers"] = copy.deepcopy(init)
    if scheduler:
        spec["schedulerName"] = scheduler
    if security is not None:
        spec["securityContext"] = dict(NONROOT if security == "nonroot" else security)
    meta = {"annotations": dict(HALF if annotations is None else annotations),
            "labels": dict(QUEUE if labels is None else labels)}
    return {"metadata": meta, "spec": spec}


def pod(annotations=None, labels=None, scheduler="kai-scheduler", containers=None, security="nonroot", init=None,
        owners=None):
    """The KAI docs' half-GPU pod (docs/gpu-sharing/README.md) with the guide's securityContext."""
    t = template(annotations, labels, scheduler, containers, security, init)
    meta = dict(t["metadata"], name="half-gpu", namespace="gpu-trial")
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t["spec"]}


def workload(kind, tpl, top_labels=None, top_annotations=None, api_version="apps/v1", **spec):
    """A workload whose pod template is spec.template (Deployment, Job, ...)."""
    body = dict(spec, template=tpl)
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        body.setdefault("selector", {"matchLabels": {"app": "x"}})
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "w", "namespace": "gpu-trial", "labels": dict(top_labels or {}),
                         "annotations": dict(top_annotations or {})},
            "spec": body}


def job(min_member=None, parallelism=6, completions=None, tpl=None, top_labels=None, top_annotations=None):
    """The notes' gang Job (batch-min-member on the Job, a whole GPU per pod)."""
    annotations = dict(top_annotations or {})
    if min_member is not None:
        annotations["kai.scheduler/batch-min-member"] = min_member
    spec = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    tpl = tpl or template(annotations={}, containers=[{"name": "worker", "resources": {"limits": {"nvidia.com/gpu": 1}}}])
    return workload("Job", tpl, top_labels, annotations, api_version="batch/v1", **spec)


def cronjob(tpl, job_annotations=None):
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "gpu-trial"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {
                "metadata": {"annotations": dict(job_annotations or {})}, "spec": {"template": tpl}}}}


def jobset(tpl=None, top_annotations=None, job_annotations=None, parallelism=None, jobs=1):
    """JobSet (jobset.x-k8s.io/v1alpha2): replicatedJobs[].template is a Job template."""
    replicated = []
    for index in range(jobs):
        job_spec = {"template": copy.deepcopy(tpl or template(annotations={}))}
        if parallelism is not None:
            job_spec["parallelism"] = parallelism
        replicated.append({"name": "workers-%d" % index, "replicas": 1,
                           "template": {"metadata": {"annotations": dict(job_annotations or {})}, "spec": job_spec}})
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "gpu-trial", "annotations": dict(top_annotations or {})},
            "spec": {"replicatedJobs": replicated}}


def gpu_template(annotations=None, gpus=1, security="nonroot", scheduler="kai-scheduler", labels=None):
    """A Kubeflow/Ray/LWS pod template: a whole GPU, the queue label on the workload."""
    containers = [{"name": "main", "image": "trainer",
                   "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}]
    return template(annotations or {}, labels or {}, scheduler, containers, security)


def kubeflow(kind="PyTorchJob", key="pytorchReplicaSpecs", specs=None, top_annotations=None, run_policy=None):
    """examples/batch/pytorchjob.yaml: Master and Worker, the queue label on the job."""
    if specs is None:
        specs = {"Master": {"replicas": 1, "template": gpu_template()},
                 "Worker": {"replicas": 2, "template": gpu_template()}}
    spec = {key: specs}
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": "mnist", "namespace": "gpu-trial", "labels": dict(QUEUE),
                         "annotations": dict(top_annotations or {})},
            "spec": spec}


def ray(kind="RayCluster", worker=None, min_replicas=1, replicas=2, top_annotations=None):
    """examples/ray/raycluster.yaml (a RayJob's cluster under spec.rayClusterSpec, a RayService's under
    spec.rayClusterConfig)."""
    cluster = {"headGroupSpec": {"rayStartParams": {}, "template": gpu_template(gpus=0)},
               "workerGroupSpecs": [{"groupName": "gpu-group", "replicas": replicas, "minReplicas": min_replicas,
                                     "maxReplicas": 4, "template": worker or gpu_template()}]}
    spec = {"RayCluster": cluster, "RayJob": {"entrypoint": "python train.py", "rayClusterSpec": cluster},
            "RayService": {"rayClusterConfig": cluster}}[kind]
    return {"apiVersion": "ray.io/v1", "kind": kind,
            "metadata": {"name": "raycluster-kai", "namespace": "gpu-trial", "labels": dict(QUEUE),
                         "annotations": dict(top_annotations or {})},
            "spec": spec}


def lws(worker=None, startup_policy=None):
    """LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): a leader and a worker template per group."""
    spec = {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "leaderTemplate": gpu_template(gpus=0, labels=QUEUE),
                                                    "workerTemplate": worker or gpu_template(labels=QUEUE)}}
    if startup_policy is not None:
        spec["startupPolicy"] = startup_policy
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws", "namespace": "gpu-trial"}, "spec": spec}


def podgroup(**spec):
    """examples/batch/external-podgroup-job.yaml's PodGroup (scheduling.run.ai/v2alpha2)."""
    body = {"queue": "ml-team", "minMember": 2}
    body.update(spec)
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "team-gang", "namespace": "gpu-trial"},
            "spec": dict((k, v) for k, v in body.items() if v is not None)}


def joining(skip="true", where="template", value_owner=None):
    """examples/batch/external-podgroup-job.yaml's Job: pod-group-name on the pod template, no queue label."""
    annotations = {"pod-group-name": "team-gang"}
    top = {}
    if skip is not None:
        (annotations if where == "template" else top)["kai.scheduler/skip-podgrouper"] = skip
    return job(parallelism=2, completions=2, top_annotations=top,
               tpl=gpu_template(annotations=annotations))


def secured(obj, pod_level=None, **containers):
    """obj with the pod template's securityContext (None: none) and containers' (by name)."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    while "template" in spec or "jobTemplate" in spec:
        spec = (spec.get("template") or spec["jobTemplate"])["spec"]
    spec.pop("securityContext", None)
    if pod_level is not None:
        spec["securityContext"] = dict(pod_level)
    for container in spec.get("initContainers", []) + spec["containers"]:
        if container["name"] in containers:
            container["securityContext"] = dict(containers[container["name"]])
    return obj


def second_job_asks(min_member, parallelism, completions):
    """A JobSet of two replicated jobs whose second asks min_member of parallelism/completions."""
    obj = jobset(jobs=2)
    second = obj["spec"]["replicatedJobs"][1]["template"]
    second["spec"].update(parallelism=parallelism, completions=completions)
    second["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = str(min_member)
    return obj


def without_job_metadata(obj):
    del obj["spec"]["replicatedJobs"][0]["template"]["metadata"]
    return obj


def annotated(obj, annotations):
    obj = copy.deepcopy(obj)
    obj["metadata"]["annotations"] = dict(annotations)
    return obj


CONTROLLER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-5d9", "uid": "1", "controller": True}]
NOT_CONTROLLER = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "2"}]
SIDECAR = [{"name": "gpu-workload"}, {"name": "sidecar"}]
MAIN = [{"name": "main"}]
BARE = pod(security=None)
GPU1 = [{"name": "gpu-workload", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
TF_FOUR = (("Chief", 1), ("PS", 2), ("Worker", 4), ("Evaluator", 1))


def case(case_id, obj, *expected, controlled=False):
    return Case(case_id, obj, frozenset(expected), controlled)


def nvf(request=None, limit=None):
    annotations = {}
    if request is not None:
        annotations["nvidia.com/container.main.gpu-memory.request"] = request
    if limit is not None:
        annotations["nvidia.com/container.main.gpu-memory.limit"] = limit
    return pod(annotations=annotations, containers=MAIN)


CASES = [
    # ------------------------------------------------------------ the docs' shapes pass
    case("the docs' half-GPU pod with the guide's securityContext", pod()),
    case("the docs' half-GPU pod as the notes print it (no securityContext)", BARE, ("fraction-runs-as-root", W)),
    case("a plain pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    case("a plain Deployment", workload("Deployment", {"metadata": {}, "spec": {"containers": [{"name": "c"}]}})),
    case("a plain pod with an app label and no schedulerName", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    case("the notes' gang Job", job(min_member="2")),
    case("a fractional Deployment", workload("Deployment", template())),
    case("a fractional StatefulSet", workload("StatefulSet", template())),
    case("a fractional DaemonSet", workload("DaemonSet", template())),
    case("a fractional ReplicaSet", workload("ReplicaSet", template())),
    case("a fractional ReplicationController", workload("ReplicationController", template(), api_version="v1")),
    # ------------------------------------------------------------ scheduler-name
    case("gpu-fraction without the scheduler", pod(labels={}, scheduler=None), ("scheduler-name", E)),
    case("the queue label with the default scheduler", pod(annotations={}, scheduler="default-scheduler"),
         ("scheduler-name", E)),
    case("another kai.scheduler/ annotation without the scheduler",
         pod(annotations={"kai.scheduler/foo": "1"}, labels={}, scheduler=None), ("scheduler-name", E)),
    case("an NvFractions compute annotation without the scheduler",
         pod(annotations={"nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}, containers=MAIN,
             scheduler=None), ("scheduler-name", E)),
    case("a gang Job whose template has no schedulerName", job(min_member="2", tpl=template(
        annotations={}, scheduler=None, containers=[{"name": "worker"}])), ("scheduler-name", E)),
    case("a Deployment labelled with a queue, its template with no schedulerName",
         workload("Deployment", template(annotations={}, labels={}, scheduler=None), top_labels=QUEUE),
         ("scheduler-name", E)),
    case("a bare pod joining a PodGroup, no schedulerName",
         pod(annotations={"pod-group-name": "team-gang"}, labels={}, scheduler=None), ("scheduler-name", E)),
    case("a CronJob's template with gpu-fraction 2 and no schedulerName",
         cronjob(template(annotations={"gpu-fraction": "2"}, labels={}, scheduler=None, containers=[{"name": "c"}])),
         ("scheduler-name", E), ("gpu-fraction-range", E)),
    # ------------------------------------------------------------ gpu-fraction, gpu-memory, num-devices
] + [
    case("gpu-fraction %r" % value, pod(annotations={"gpu-fraction": value}), ("gpu-fraction-range", E))
    for value in ("0", "1", "1.5", "-0.5", "half", "", "50%", "0x1", "0.5e", "1e0")
] + [
    case("gpu-fraction %r" % value, pod(annotations={"gpu-fraction": value}))
    for value in (".25", "0.999", "5e-1", " 0.5 ", "0.05E+0".replace("+", ""))
] + [
    case("gpu-memory %r" % value, pod(annotations={"gpu-memory": value}), ("gpu-memory-value", E))
    for value in ("4Gi", "0", "-1", "4096.5", "lots", "00", "")
] + [
    case("gpu-memory %r" % value, pod(annotations={"gpu-memory": value}))
    for value in ("4096", " 2048 ", "007")
] + [
    case("gpu-fraction and gpu-memory together", pod(annotations={"gpu-fraction": "0.5", "gpu-memory": "4096"}),
         ("fraction-and-memory", E)),
    case("a share spread over two devices", pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})),
    case("gpu-fraction-num-devices 'two'", pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "two"}),
         ("num-devices", E)),
    case("gpu-fraction-num-devices '0'", pod(annotations={"gpu-memory": "1024", "gpu-fraction-num-devices": "0"}),
         ("num-devices", E)),
    case("gpu-fraction-num-devices without a share", pod(annotations={"gpu-fraction-num-devices": "2"}),
         ("num-devices", E)),
    # ------------------------------------------------------------ containers
    case("a fraction and a whole GPU in the limits", pod(containers=GPU1), ("fraction-with-whole-gpu", E)),
    case("gpu-memory and a whole GPU requested by an init container",
         pod(annotations={"gpu-memory": "2000"}, init=[{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]),
         ("fraction-with-whole-gpu", E)),
    case("an NvFractions share beside a whole GPU (not this rule's: only gpu-fraction/gpu-memory)",
         pod(annotations={"nvidia.com/container.gpu-workload.gpu-memory.limit": "8Gi"}, containers=GPU1)),
    case("two containers ask for a share", pod(
        annotations={"gpu-fraction": "0.5", "nvidia.com/container.side.gpu-memory.request": "4096Mi"},
        containers=[{"name": "main"}, {"name": "side"}]), ("one-fractional-container", E)),
    case("two NvFractions containers", pod(
        annotations={"nvidia.com/container.a.gpu-memory.request": "1Gi", "nvidia.com/container.b.gpu-compute.mode": "x"},
        containers=[{"name": "a"}, {"name": "b"}]), ("one-fractional-container", E)),
    case("the seed's smoke pod: fraction and compute mode on one container",
         pod(annotations={"gpu-fraction": "0.5", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"},
             containers=MAIN)),
    case("gpu-fraction-container-name moves the share to the container the memory cap names", pod(
        annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-workload",
                     "nvidia.com/container.gpu-workload.gpu-memory.limit": "8Gi"},
        containers=[{"name": "sidecar"}, {"name": "gpu-workload"}])),
    case("gpu-fraction-container-name names a container the pod lacks",
         pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}), ("unknown-container", E)),
    case("a compute annotation for a container the pod lacks, beside the fraction of the first",
         pod(annotations={"gpu-fraction": "0.5", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}),
         ("unknown-container", E), ("one-fractional-container", E)),
    case("gpu-memory for the first container and a compute setting for the second", pod(
        annotations={"gpu-memory": "4096", "nvidia.com/container.side.gpu-compute.mode": "x"},
        containers=[{"name": "main"}, {"name": "side"}]), ("one-fractional-container", E)),
    case("a container setting (no share) for a container the pod lacks",
         pod(annotations={"gpu-fraction": "0.5", "nvidia.com/container.ghost.other": "x"}), ("unknown-container", E)),
    case("a user-set gpus.devices annotation",
         pod(annotations={"gpu-fraction": "0.5", "nvidia.com/container.gpu-workload.gpus.devices": "GPU-1234"}),
         ("reserved-annotation", E)),
    case("a user-set gpus.devices annotation for a container the pod lacks",
         pod(annotations={"gpu-fraction": "0.5", "nvidia.com/container.ghost.gpus.devices": "GPU-1"}),
         ("reserved-annotation", E)),
] + [
    case("NvFractions memory %s/%s" % (request, limit), nvf(request, limit), *(
        [("nvfractions-quantity", E)] if bad else []))
    for request, limit, bad in (("4096", "8Gi", False), ("4Gi", "4096Mi", False), ("1.5Gi", "2G", False),
                                ("1k", "1Ki", False), ("0.5Mi", None, False), ("lots", None, True), ("0", None, True),
                                ("00.0Gi", None, True), ("1e3", None, True), ("8Gi", "4Gi", True),
                                ("2G", "1.5Gi", True), ("4Gi", "lots", True), ("1Ei", "1E", True),
                                (None, "4Gi", False))
] + [
    # ------------------------------------------------------------ placement and queue labels
    case("gpu-fraction on the Job itself", job(top_annotations={"gpu-fraction": "0.5"}, tpl=template(
        annotations={}, containers=[{"name": "worker"}])), ("annotation-placement", E)),
    case("an NvFractions annotation on the Deployment itself",
         workload("Deployment", template(), top_annotations={"nvidia.com/container.x.gpu-memory.request": "1Gi"}),
         ("annotation-placement", E)),
    case("the old runai/queue label", pod(labels={"runai/queue": "ml-team"}),
         ("legacy-queue-label", E), ("queue-label-missing", W)),
    case("runai/queue beside kai.scheduler/queue", pod(labels={"runai/queue": "ml-team", "kai.scheduler/queue": "x"})),
    case("runai/queue on the Deployment, none on its template", workload(
        "Deployment", template(labels={}), top_labels={"runai/queue": "ml-team"}),
        ("legacy-queue-label", E), ("queue-label-missing", W)),
    case("no queue label", pod(labels={}), ("queue-label-missing", W)),
    case("no queue label on a pod another object owns (not its controller)",
         pod(labels={}, owners=NOT_CONTROLLER), ("queue-label-missing", W)),
    case("no queue label on a pod a ReplicaSet controls: its owner's template decides",
         pod(labels={}, owners=CONTROLLER), controlled=True),
    case("a gang Job labelled research, its template ml-team",
         job(min_member="2", top_labels={"kai.scheduler/queue": "research"}), ("queue-label-conflict", W)),
    case("a Deployment and its template agree on the queue", workload("Deployment", template(), top_labels=QUEUE)),
    # ------------------------------------------------------------ gangs
] + [
    case("batch-min-member %r" % value, job(min_member=value), ("min-member-value", E))
    for value in ("0", "two", "-1", "1.5", "")
] + [
    case("batch-min-member 8 with parallelism 6", job(min_member="8"), ("min-member-too-large", E)),
    case("batch-min-member 2 with the default parallelism 1", job(min_member="2", parallelism=None),
         ("min-member-too-large", E)),
    case("batch-min-member 4 with parallelism 6 and completions 3", job(min_member="4", completions=3),
         ("min-member-too-large", E)),
    case("batch-min-member 6 with parallelism and completions 6", job(min_member="6", completions=6)),
    case("batch-min-member of 20 digits", job(min_member="99999999999999999999"), ("min-member-too-large", E)),
    case("batch-min-member ' 3 ' with parallelism 6", job(min_member=" 3 ")),
    case("batch-min-member on a Pod (nothing to size it against)", pod(
        annotations={"gpu-fraction": "0.5", "kai.scheduler/batch-min-member": "4"})),
    case("a JobSet asking for 2 replicated jobs of 1", jobset(top_annotations={"kai.scheduler/batch-min-member": "2"}),
         ("min-member-too-large", E)),
    case("a JobSet asking for 2 replicated jobs of 2", jobset(
        top_annotations={"kai.scheduler/batch-min-member": "2"}, jobs=2)),
    case("a JobSet's replicated job asking 5 of parallelism 4", jobset(
        job_annotations={"kai.scheduler/batch-min-member": "5"}, parallelism=4), ("min-member-too-large", E)),
    case("a JobSet's replicated job asking 4 of parallelism 4", jobset(
        job_annotations={"kai.scheduler/batch-min-member": "4"}, parallelism=4)),
    case("a JobSet's replicated job with batch-min-member 'x'", jobset(
        job_annotations={"kai.scheduler/batch-min-member": "x"}), ("min-member-value", E)),
    case("a JobSet's fractional pod template", jobset(tpl=template(security=None)), ("fraction-runs-as-root", W)),
    case("a JobSet's replicated job asking 2 of the default parallelism 1", jobset(
        job_annotations={"kai.scheduler/batch-min-member": "2"}), ("min-member-too-large", E)),
    case("a JobSet's replicated job with batch-min-member '0'", jobset(
        job_annotations={"kai.scheduler/batch-min-member": "0"}), ("min-member-value", E)),
    case("a JobSet whose second replicated job asks 3 of completions 2", second_job_asks(3, 4, 2),
         ("min-member-too-large", E)),
    case("a JobSet whose replicated job template has no metadata", without_job_metadata(jobset())),
    case("batch-min-member 2 with completions 5 and the default parallelism 1",
         job(min_member="2", parallelism=None, completions=5), ("min-member-too-large", E)),
    case("batch-min-member 1 with parallelism 0", job(min_member="1", parallelism=0), ("min-member-too-large", E)),
    # ------------------------------------------------------------ Kubeflow
    case("examples/batch/pytorchjob.yaml", kubeflow()),
    case("a PyTorchJob whose worker asks gpu-fraction 1.5 beside a whole GPU, without schedulerName", kubeflow(specs={
        "Master": {"replicas": 1, "template": gpu_template()},
        "Worker": {"replicas": 2, "template": gpu_template({"gpu-fraction": "1.5"}, scheduler=None)}}),
        ("scheduler-name", E), ("gpu-fraction-range", E), ("fraction-with-whole-gpu", E)),
    case("a TFJob's fractional worker with no securityContext", kubeflow("TFJob", "tfReplicaSpecs", {
        "Chief": {"replicas": 1, "template": gpu_template()},
        "Worker": {"replicas": 1, "template": gpu_template(HALF, gpus=0, security=None)}}),
        ("fraction-runs-as-root", W)),
    case("an XGBoostJob without its Master", kubeflow("XGBoostJob", "xgbReplicaSpecs", {
        "Worker": {"replicas": 2, "template": gpu_template()}}), ("group-sizes", E)),
    case("a JAXJob without its Worker", kubeflow("JAXJob", "jaxReplicaSpecs", {
        "Master": {"replicas": 1, "template": gpu_template()}}), ("group-sizes", E)),
    case("an MPIJob with Launcher and Worker", kubeflow("MPIJob", "mpiReplicaSpecs", {
        "Launcher": {"replicas": 1, "template": gpu_template(gpus=0)},
        "Worker": {"replicas": 2, "template": gpu_template()}})),
    case("a PyTorchJob with 0 workers", kubeflow(specs={
        "Master": {"replicas": 1, "template": gpu_template()}, "Worker": {"replicas": 0, "template": gpu_template()}}),
        ("group-sizes", E)),
    case("a PyTorchJob whose workers' replicas is unset", kubeflow(specs={
        "Master": {"replicas": 1, "template": gpu_template()}, "Worker": {"template": gpu_template()}}),
        ("group-sizes", E)),
    case("minAvailable 3 of 1 + 2 replicas", kubeflow(run_policy={"schedulingPolicy": {"minAvailable": 3}})),
    case("minAvailable 5 of 1 + 2 replicas", kubeflow(run_policy={"schedulingPolicy": {"minAvailable": 5}}),
         ("min-member-too-large", E)),
    case("minAvailable 0", kubeflow(run_policy={"schedulingPolicy": {"minAvailable": 0}}), ("min-member-value", E)),
    case("minAvailable 1 sizes a job whose workers are 0 (replicas not checked then)", kubeflow(
        specs={"Master": {"replicas": 1, "template": gpu_template()}, "Worker": {"replicas": 0, "template": gpu_template()}},
        run_policy={"schedulingPolicy": {"minAvailable": 1}})),
    case("minAvailable 2 with a replica spec that has no replicas", kubeflow(
        specs={"Master": {"replicas": 1, "template": gpu_template()}, "Worker": {"template": gpu_template()}},
        run_policy={"schedulingPolicy": {"minAvailable": 2}})),
    case("batch-min-member on a PyTorchJob", kubeflow(top_annotations={"kai.scheduler/batch-min-member": "2"}),
         ("min-member-ignored", W)),
    case("batch-min-member 'x' on a PyTorchJob", kubeflow(top_annotations={"kai.scheduler/batch-min-member": "x"}),
         ("min-member-value", E)),
    case("a TFJob of four replica types, minAvailable their sum", kubeflow("TFJob", "tfReplicaSpecs", dict(
        (t, {"replicas": n, "template": gpu_template()}) for t, n in TF_FOUR),
        run_policy={"schedulingPolicy": {"minAvailable": 8}})),
    case("a TFJob of four replica types, minAvailable one more than their sum", kubeflow("TFJob", "tfReplicaSpecs", dict(
        (t, {"replicas": n, "template": gpu_template()}) for t, n in TF_FOUR),
        run_policy={"schedulingPolicy": {"minAvailable": 9}}), ("min-member-too-large", E)),
    case("an MPIJob with 0 workers", kubeflow("MPIJob", "mpiReplicaSpecs", {
        "Launcher": {"replicas": 1, "template": gpu_template(gpus=0)},
        "Worker": {"replicas": 0, "template": gpu_template()}}), ("group-sizes", E)),
    case("a JAXJob with no replica specs", kubeflow("JAXJob", "jaxReplicaSpecs", {}), ("group-sizes", E)),
    case("an XGBoostJob with minAvailable 4 of 1 + 2", kubeflow("XGBoostJob", "xgbReplicaSpecs", {
        "Master": {"replicas": 1, "template": gpu_template()}, "Worker": {"replicas": 2, "template": gpu_template()}},
        run_policy={"schedulingPolicy": {"minAvailable": 4}}), ("min-member-too-large", E)),
    case("a PyTorchJob with no replica specs and minAvailable 1", kubeflow(
        specs={}, run_policy={"schedulingPolicy": {"minAvailable": 1}}), ("min-member-too-large", E)),
    case("a JAXJob of one Worker, minAvailable 2", kubeflow("JAXJob", "jaxReplicaSpecs", {
        "Worker": {"replicas": 1, "template": gpu_template()}}, run_policy={"schedulingPolicy": {"minAvailable": 2}}),
        ("min-member-too-large", E)),
    case("a TFJob of three replica types, minAvailable their sum", kubeflow("TFJob", "tfReplicaSpecs", dict(
        (t, {"replicas": n, "template": gpu_template()}) for t, n in (("Chief", 1), ("PS", 1), ("Worker", 2))),
        run_policy={"schedulingPolicy": {"minAvailable": 4}})),
    case("batch-min-member '0' on a RayCluster", ray(top_annotations={"kai.scheduler/batch-min-member": "0"}),
         ("min-member-value", E)),
    # ------------------------------------------------------------ Ray and LeaderWorkerSet
    case("examples/ray/raycluster.yaml", ray()),
    case("a RayService's cluster", ray("RayService")),
    case("a Ray worker group with minReplicas 3 of 2", ray(min_replicas=3), ("group-sizes", E)),
    case("a Ray worker group with minReplicas 2 of 2", ray(min_replicas=2)),
    case("a RayJob worker group with minReplicas 3 of 2", ray("RayJob", min_replicas=3), ("group-sizes", E)),
    case("a RayService worker group with minReplicas 3 of 2", ray("RayService", min_replicas=3), ("group-sizes", E)),
    case("a RayService's fractional worker that may run as root",
         ray("RayService", worker=gpu_template(HALF, gpus=0, security=None)), ("fraction-runs-as-root", W)),
    case("a RayJob whose fractional worker runs as uid 0",
         ray("RayJob", worker=gpu_template(HALF, gpus=0, security={"runAsUser": 0})), ("fraction-runs-as-root", E)),
    case("batch-min-member on a RayCluster", ray(top_annotations={"kai.scheduler/batch-min-member": "3"}),
         ("min-member-ignored", W)),
    case("a LeaderWorkerSet", lws()),
    case("a LeaderWorkerSet with startupPolicy LeaderReady", lws(startup_policy="LeaderReady")),
    case("a LeaderWorkerSet with startupPolicy Eventually", lws(startup_policy="Eventually"), ("group-sizes", E)),
    case("a LeaderWorkerSet's fractional worker with no securityContext",
         lws(worker=gpu_template(HALF, gpus=0, security=None, labels=QUEUE)), ("fraction-runs-as-root", W)),
    # ------------------------------------------------------------ PodGroups and the pods that join them
    case("examples/batch/external-podgroup-job.yaml's PodGroup", podgroup()),
    case("a PodGroup without a queue", podgroup(queue=None), ("podgroup-queue-missing", W)),
    case("a PodGroup with queue ''", podgroup(queue=""), ("podgroup-queue-missing", W)),
    case("a PodGroup with minMember -1", podgroup(minMember=-1), ("podgroup-spec", E)),
    case("a PodGroup with minMember and minSubGroup", podgroup(minSubGroup=1), ("podgroup-spec", E)),
    case("a PodGroup with minMember 0", podgroup(minMember=0)),
    case("a PodGroup with minSubGroup 0", podgroup(minMember=None, minSubGroup=0)),
    case("a PodGroup carrying gpu-fraction (it has no pod template: not a placement finding)",
         annotated(podgroup(), {"gpu-fraction": "0.5"})),
    case("a PodGroup with minSubGroup -1", podgroup(minMember=None, minSubGroup=-1), ("podgroup-spec", E)),
    case("a PodGroup sized by its subgroups", podgroup(minMember=None, minSubGroup=2, subGroups=[
        {"name": "workers", "minSubGroup": 2}, {"name": "w-0", "parent": "workers", "minMember": 2},
        {"name": "w-1", "parent": "workers", "minMember": 2}])),
    case("a PodGroup with two subgroups of one name", podgroup(subGroups=[
        {"name": "w", "minMember": 1}, {"name": "w", "minMember": 1}]), ("podgroup-spec", E)),
    case("a PodGroup subgroup named 'Workers'", podgroup(subGroups=[{"name": "Workers", "minMember": 1}]),
         ("podgroup-spec", E)),
    case("a PodGroup subgroup whose parent is missing", podgroup(subGroups=[
        {"name": "w-0", "parent": "workers", "minMember": 1}]), ("podgroup-spec", E)),
    case("a PodGroup parent sized by minMember", podgroup(subGroups=[
        {"name": "workers", "minMember": 2}, {"name": "w-0", "parent": "workers", "minMember": 1}]),
        ("podgroup-spec", E)),
    case("the external-PodGroup Job, skip-podgrouper on its template", joining()),
    case("a Job joining a PodGroup without skip-podgrouper", joining(skip=None), ("pod-group-skip", E)),
    case("a Job joining a PodGroup, skip-podgrouper on the Job", joining(where="job")),
    case("a Job joining a PodGroup with skip-podgrouper 'True'", joining(skip="True"), ("pod-group-skip", E)),
    case("a CronJob joining a PodGroup, skip-podgrouper on its jobTemplate", cronjob(
        gpu_template({"pod-group-name": "team-gang"}), job_annotations={"kai.scheduler/skip-podgrouper": "true"})),
    case("a JobSet's pods joining a PodGroup, skip-podgrouper on the replicated job's template", jobset(
        tpl=gpu_template({"pod-group-name": "team-gang"}),
        job_annotations={"kai.scheduler/skip-podgrouper": "true"})),
    case("an ownerless pod joining a PodGroup needs no skip-podgrouper",
         pod(annotations={"gpu-fraction": "0.5", "pod-group-name": "team-gang"}, labels={})),
    case("a pod another object owns joins a PodGroup without skip-podgrouper", pod(
        annotations={"gpu-fraction": "0.5", "pod-group-name": "team-gang"}, labels={}, owners=NOT_CONTROLLER),
        ("pod-group-skip", E)),
    case("a pod a ReplicaSet controls joins a PodGroup without skip-podgrouper (the linter judges the pod; "
         "admission leaves it to its owner, which may carry the annotation)",
         pod(annotations={"gpu-fraction": "0.5", "pod-group-name": "team-gang"}, labels={}, owners=CONTROLLER),
         ("pod-group-skip", E), controlled=True),
    # ------------------------------------------------------------ fraction-runs-as-root
    case("pod-level runAsNonRoot true alone", secured(BARE, {"runAsNonRoot": True})),
    case("container-level runAsNonRoot true", secured(BARE, None, **{"gpu-workload": {"runAsNonRoot": True}})),
    case("runAsUser 1000 without runAsNonRoot", secured(BARE, {"runAsUser": 1000})),
    case("runAsUser 1000 on the container, runAsNonRoot false on the pod",
         secured(BARE, {"runAsNonRoot": False}, **{"gpu-workload": {"runAsUser": 1000}})),
    case("only other securityContext settings", secured(BARE, {"fsGroup": 1000}, **{"gpu-workload": {"privileged": False}}),
         ("fraction-runs-as-root", W)),
    case("runAsNonRoot false on the pod", secured(BARE, {"runAsNonRoot": False}), ("fraction-runs-as-root", E)),
    case("runAsNonRoot false on the container over the pod's true",
         secured(BARE, {"runAsNonRoot": True}, **{"gpu-workload": {"runAsNonRoot": False}}), ("fraction-runs-as-root", E)),
    case("the container's runAsUser 0 over the pod's non-root context",
         secured(BARE, NONROOT, **{"gpu-workload": {"runAsUser": 0}}), ("fraction-runs-as-root", E)),
    case("runAsUser 0 and runAsNonRoot true", secured(BARE, None, **{"gpu-workload": {"runAsUser": 0, "runAsNonRoot": True}}),
         ("fraction-runs-as-root", E)),
    case("pod-level runAsUser 0", secured(BARE, {"runAsUser": 0, "runAsNonRoot": True}), ("fraction-runs-as-root", E)),
    case("the container's runAsUser 1000 over the pod's 0",
         secured(BARE, {"runAsUser": 0, "runAsNonRoot": True}, **{"gpu-workload": {"runAsUser": 1000}})),
    case("a non-fractional pod as root is not this rule's", secured(pod(annotations={}), {"runAsUser": 0})),
    case("gpu-memory is fractional too", pod(annotations={"gpu-memory": "4096"}, security=None),
         ("fraction-runs-as-root", W)),
    case("NvFractions memory is fractional too", pod(
        annotations={"nvidia.com/container.main.gpu-memory.request": "4Gi"}, containers=MAIN, security=None),
        ("fraction-runs-as-root", W)),
    case("a root sidecar beside a non-root fraction container",
         secured(pod(containers=SIDECAR), NONROOT, sidecar={"runAsUser": 0}), ("fraction-runs-as-root", E)),
    case("a root init container", secured(pod(init=[{"name": "warm"}]), NONROOT, warm={"runAsUser": 0}),
         ("fraction-runs-as-root", E)),
    case("pod-level runAsUser 0: both containers run as root (the share's container is skipped as root)",
         secured(pod(containers=SIDECAR), {"runAsUser": 0}), ("fraction-runs-as-root", E)),
    case("the share's container non-root, the sidecar open", secured(
        pod(containers=SIDECAR), None, **{"gpu-workload": {"runAsNonRoot": True}})),
    case("the share's container open, the sidecar non-root",
         secured(pod(containers=SIDECAR), None, sidecar={"runAsNonRoot": True}),
         ("fraction-runs-as-root", W)),
    case("the share moved to a non-root sidecar", secured(
        pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}, containers=SIDECAR),
        None, sidecar={"runAsNonRoot": True})),
    case("the share moved to a sidecar with runAsNonRoot false", secured(
        pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}, containers=SIDECAR),
        None, **{"gpu-workload": {"runAsNonRoot": True}, "sidecar": {"runAsNonRoot": False}}),
        ("fraction-runs-as-root", E)),
    case("a root sidecar beside a share container that leaves it open: both", secured(
        pod(containers=SIDECAR), None, sidecar={"runAsUser": 0}), ("fraction-runs-as-root", E),
        ("fraction-runs-as-root", W)),
    case("the share names a container the pod lacks, the pod's own context is open",
         pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}, security=None),
         ("unknown-container", E), ("fraction-runs-as-root", W)),
    case("the share names a container the pod lacks, pod-level runAsUser 0 (root, and nonroot unset)",
         pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}, security={"runAsUser": 0}),
         ("unknown-container", E), ("fraction-runs-as-root", E), ("fraction-runs-as-root", W)),
    case("the share names a container the pod lacks, pod-level runAsNonRoot false",
         pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}, security={"runAsNonRoot": False}),
         ("unknown-container", E), ("fraction-runs-as-root", E)),
    case("the share names a container the pod lacks, pod-level runAsUser 1000",
         pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}, security={"runAsUser": 1000}),
         ("unknown-container", E)),
    case("a Deployment's template as root", secured(workload("Deployment", template()), None,
                                                    **{"gpu-workload": {"runAsUser": 0}}), ("fraction-runs-as-root", E)),
    case("a CronJob's fractional template with no securityContext", cronjob(template(security=None)),
         ("fraction-runs-as-root", W)),
]

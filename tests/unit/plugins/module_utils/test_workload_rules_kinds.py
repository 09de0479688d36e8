# Apache-2.0
"""The lint on every workload kind KAI's podgrouper groups, PodGroups and the pods that join
them, and the rules that depend on the cluster's sharing mode. Each manifest here is written
for the test, in the shape of the upstream example or doc named beside it (kai-scheduler/
KAI-Scheduler unless said); the upstream file is the source of the field paths and values."""
import copy

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import workload_rules as wr

TREE = [{"name": "research"}, {"name": "ml-team", "parent": "research"}, {"name": "default-queue"}]
NONROOT = {"runAsNonRoot": True, "runAsUser": 1000}


def template(annotations=None, scheduler="kai-scheduler", gpus=1, security="nonroot", labels=None):
    spec = {"containers": [{"name": "main", "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if security:
        spec["securityContext"] = dict(NONROOT if security == "nonroot" else security)
    return {"metadata": {"annotations": dict(annotations or {}), "labels": dict(labels or {})}, "spec": spec}


def pytorchjob(worker=None, master=None, replicas=(1, 2), top_annotations=None, run_policy=None):
    """examples/batch/pytorchjob.yaml: Master and Worker, schedulerName on each template, the queue label on
    the job."""
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "mnist", "namespace": "gpu-trial", "labels": {"kai.scheduler/queue": "ml-team"},
                        "annotations": dict(top_annotations or {})},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": replicas[0], "restartPolicy": "OnFailure", "template": master or template()},
               "Worker": {"replicas": replicas[1], "restartPolicy": "OnFailure", "template": worker or template()}}}}
    if run_policy is not None:
        obj["spec"]["runPolicy"] = run_policy
    return obj


def raycluster(worker=None, min_replicas=1, replicas=2):
    """examples/ray/raycluster.yaml: a head group and one worker group, the queue label on the cluster."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "raycluster-kai", "namespace": "gpu-trial",
                         "labels": {"kai.scheduler/queue": "ml-team"}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template(gpus=0)},
                     "workerGroupSpecs": [{"groupName": "gpu-group", "replicas": replicas,
                                           "minReplicas": min_replicas, "maxReplicas": 4,
                                           "template": worker or template()}]}}


def podgroup(**spec):
    """examples/batch/external-podgroup-job.yaml's PodGroup (scheduling.run.ai/v2alpha2)."""
    body = {"queue": "ml-team", "minMember": 2}
    body.update(spec)
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "team-gang", "namespace": "gpu-trial"},
            "spec": dict((k, v) for k, v in body.items() if v is not None)}


def joining_job(skip="true", parallelism=2, where="template", labels=None):
    """examples/batch/external-podgroup-job.yaml's Job: pod-group-name on the pod template, the podgrouper
    kept out by kai.scheduler/skip-podgrouper: "true" (docs/developer/designs/external-podgroups: on the pod
    or an owner), no queue label (the PodGroup's spec.queue decides)."""
    annotations = {"pod-group-name": "team-gang"}
    top = {}
    if skip is not None:
        (annotations if where == "template" else top)["kai.scheduler/skip-podgrouper"] = skip
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "gang-job", "namespace": "gpu-trial", "annotations": top},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "template": template(annotations=annotations, labels=labels)}}


def rules(objects, sharing_mode=None):
    return [(f.rule, f.severity, f.field) for f in wr.lint(objects, queues=TREE, sharing_mode=sharing_mode)]


# ---------------------------------------------------------------- the upstream shapes pass
@pytest.mark.parametrize("obj", [pytorchjob(), raycluster()], ids=["pytorchjob", "raycluster"])
def test_the_upstream_examples_pass(obj):
    assert rules([obj]) == []


def test_the_external_podgroup_example_passes_and_its_job_is_not_sent_to_default_queue():
    # before: the Job's pods were told "KAI puts the pod in 'default-queue'" (queue-label-missing)
    assert rules([podgroup(), joining_job()]) == []


# ---------------------------------------------------------------- every kind's templates are checked
def test_a_pytorchjob_with_the_issues_broken_worker_gets_every_finding():
    broken = template(annotations={"gpu-fraction": "1.5"}, scheduler=None)
    found = rules([pytorchjob(worker=broken)])
    worker = "spec.pytorchReplicaSpecs.Worker.template"
    assert ("scheduler-name", "error", worker + ".spec.schedulerName") in found
    assert ("gpu-fraction-range", "error", worker + ".metadata.annotations[gpu-fraction]") in found
    assert [field for rule, _s, field in found if rule == "fraction-with-whole-gpu"] == [
        worker + ".spec.containers[0].resources.limits[nvidia.com/gpu]"]


@pytest.mark.parametrize("kind, key", [("TFJob", "tfReplicaSpecs"), ("XGBoostJob", "xgbReplicaSpecs"),
                                       ("JAXJob", "jaxReplicaSpecs"), ("MPIJob", "mpiReplicaSpecs")])
def test_each_kubeflow_kind_has_its_templates_checked(kind, key):
    # KAI's plugins/kubeflow/<kind>: the replica specs key under spec
    types = {"XGBoostJob": ["Master", "Worker"], "JAXJob": ["Worker"], "MPIJob": ["Launcher", "Worker"]}
    specs = dict((t, {"replicas": 1, "template": template()}) for t in types.get(kind, ["Chief", "Worker"]))
    specs["Worker"]["template"] = template(annotations={"gpu-fraction": "0.5"}, gpus=0, security=None)
    obj = {"apiVersion": "kubeflow.org/v1", "kind": kind,
           "metadata": {"name": "j", "namespace": "gpu-trial", "labels": {"kai.scheduler/queue": "ml-team"}},
           "spec": {key: specs}}
    assert rules([obj]) == [("fraction-runs-as-root", "warning",
                             "spec.%s.Worker.template.spec.securityContext.runAsNonRoot" % key)]


def test_a_fractional_ray_worker_that_may_run_as_root_is_found_on_rayjob_too():
    # examples/ray/rayjob.yaml: the cluster spec under spec.rayClusterSpec
    cluster = raycluster(worker=template(annotations={"gpu-fraction": "0.5"}, gpus=0,
                                         security={"runAsUser": 0}))
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": cluster["metadata"],
           "spec": {"entrypoint": "python train.py", "rayClusterSpec": cluster["spec"]}}
    assert rules([job]) == [("fraction-runs-as-root", "error",
                             "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.securityContext.runAsUser")]


# ---------------------------------------------------------------- gang sizes
def test_a_kubeflow_replica_spec_without_replicas_gets_no_podgroup():
    # plugins/kubeflow/distributed_common.go: the gang is the sum of replicas, a missing one is an error
    job = pytorchjob()
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    assert rules([job]) == [("group-sizes", "error", "spec.pytorchReplicaSpecs.Worker.replicas")]
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}   # minAvailable decides instead
    assert rules([job]) == []


def test_an_mpijob_without_its_launcher():
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "pi", "namespace": "gpu-trial", "labels": {"kai.scheduler/queue": "ml-team"}},
           "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": template()}}}}
    found = wr.lint([job], queues=TREE)
    assert [(f.rule, f.field) for f in found] == [("group-sizes", "spec.mpiReplicaSpecs")]
    assert "no Launcher replica spec" in found[0].message


def test_min_available_above_the_replicas_never_forms():
    found = rules([pytorchjob(run_policy={"schedulingPolicy": {"minAvailable": 5}})])
    assert found == [("min-member-too-large", "error", "spec.runPolicy.schedulingPolicy.minAvailable")]


def test_batch_min_member_on_a_pytorchjob_is_ignored_by_its_podgrouper():
    found = wr.lint([pytorchjob(top_annotations={"kai.scheduler/batch-min-member": "3"})], queues=TREE)
    assert [(f.rule, f.severity) for f in found] == [("min-member-ignored", "warning")]
    assert "schedulingPolicy.minAvailable" in found[0].message


def test_a_ray_worker_group_whose_min_replicas_exceed_its_replicas():
    # plugins/ray/ray_grouper.go refuses minReplicas > replicas
    assert rules([raycluster(min_replicas=3, replicas=2)]) == [
        ("group-sizes", "error", "spec.workerGroupSpecs[0].minReplicas")]


# ---------------------------------------------------------------- PodGroups and the pods that join them
def test_a_joining_pod_without_skip_podgrouper():
    found = wr.lint([podgroup(), joining_job(skip=None)], queues=TREE)
    assert [(f.rule, f.field) for f in found] == [
        ("pod-group-skip", "spec.template.metadata.annotations[pod-group-name]")]
    assert "kai.scheduler/skip-podgrouper" in found[0].message


@pytest.mark.parametrize("value", ["True", "yes", True])
def test_only_the_exact_string_true_keeps_the_podgrouper_out(value):
    found = wr.lint([podgroup(), joining_job(skip=value)], queues=TREE)
    assert [f.rule for f in found] == ["pod-group-skip"] and "exact string" in found[0].message


def test_skip_podgrouper_on_the_workload_counts():
    assert rules([podgroup(), joining_job(where="workload")]) == []


def test_a_podgroup_its_pods_cannot_fill():
    found = wr.lint([podgroup(minMember=4), joining_job(parallelism=2)], queues=TREE)
    assert [(f.rule, f.severity, f.field) for f in found] == [("podgroup-members", "warning", "spec.minMember")]
    assert "is 4 but the manifests checked add 2 pods" in found[0].message


def test_pods_in_another_namespace_do_not_fill_it():
    other = joining_job(parallelism=4)
    other["metadata"]["namespace"] = "elsewhere"
    assert rules([podgroup(minMember=4), other]) == []      # no pod of its namespace joins: nothing to say


@pytest.mark.parametrize("spec, field", [
    ({"minSubGroup": 1}, "spec"),
    ({"minMember": -1}, "spec.minMember"),
    ({"minMember": None, "subGroups": [{"name": "a"}, {"name": "a"}]}, "spec.subGroups[1].name"),
    ({"minMember": None, "subGroups": [{"name": "w", "parent": "nope"}]}, "spec.subGroups[0].parent"),
    ({"minMember": None, "subGroups": [{"name": "Workers"}]}, "spec.subGroups[0].name"),
    # examples/semi-preemptible/podgroup-subgroups.yaml sizes a parent with minSubGroup
    ({"minMember": None, "minSubGroup": 1, "subGroups": [{"name": "p", "minMember": 2},
                                                         {"name": "c", "parent": "p", "minMember": 1}]},
     "spec.subGroups[0].minMember"),
])
def test_podgroup_spec(spec, field):
    assert rules([podgroup(**spec)]) == [("podgroup-spec", "error", field)]


def test_podgroup_queue_is_checked_against_the_tree():
    assert rules([podgroup(queue="research")]) == [("queue-not-leaf", "error", "spec.queue")]
    assert rules([podgroup(queue=None)]) == [("podgroup-queue-missing", "warning", "spec.queue")]


# ---------------------------------------------------------------- the sharing mode
HALF = {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "half", "namespace": "gpu-trial", "labels": {"kai.scheduler/queue": "ml-team"},
                     "annotations": {"gpu-fraction": "0.5"}},
        "spec": {"schedulerName": "kai-scheduler", "securityContext": NONROOT, "containers": [{"name": "main"}]}}
NVF = copy.deepcopy(HALF)
NVF["metadata"]["annotations"] = {"nvidia.com/container.main.gpu-memory.request": "8Gi",
                                  "nvidia.com/container.main.gpu-memory.limit": "8Gi"}


@pytest.mark.parametrize("obj, mode, expected", [
    (HALF, None, []),
    (HALF, "NvFractions", []),
    (NVF, "NvFractions", []),
    (HALF, "Disabled", [("sharing-mode", "error", "metadata.annotations[gpu-fraction]")]),
    (NVF, "Disabled", [("sharing-mode", "error",
                        "metadata.annotations[nvidia.com/container.main.gpu-memory.limit]")]),
    (NVF, "HamiCore", [("sharing-mode", "warning",
                        "metadata.annotations[nvidia.com/container.main.gpu-memory.limit]")]),
    (HALF, "NonMemoryEnforced", [("sharing-mode", "warning", "metadata.annotations[gpu-fraction]")]),
])
def test_rules_of_the_sharing_mode(obj, mode, expected):
    assert rules([obj], sharing_mode=mode) == expected


def test_a_sharing_mode_of_another_spelling_is_refused():
    with pytest.raises(ValueError, match="NvFractions"):
        wr.lint([HALF], sharing_mode="nvfractions")


# ---------------------------------------------------------------- across files
def test_a_podgroup_and_its_job_in_two_files(tmp_path):
    import yaml
    (tmp_path / "a-podgroup.yaml").write_text(yaml.safe_dump(podgroup(minMember=3)))
    (tmp_path / "b-job.yaml").write_text(yaml.safe_dump(joining_job(parallelism=2)))
    findings, checked, _files = wr.lint_files([str(tmp_path)], yaml.safe_load_all, (yaml.YAMLError,), TREE)
    assert checked == 2 and [(f.rule, f.source.rsplit("/", 1)[-1]) for f in findings] == [
        ("podgroup-members", "a-podgroup.yaml")]


def test_an_ownerless_pod_joins_without_skip_podgrouper():
    # pkg/podgrouper/pod_controller.go (isOrphanPodWithPodGroup) leaves it alone; shape of
    # examples/staleness-grace-period/01-pods.yaml
    member = copy.deepcopy(HALF)
    member["metadata"]["annotations"]["pod-group-name"] = "team-gang"
    assert wr.lint([member], queues=TREE) == []


def test_a_live_pod_the_podgrouper_grouped_is_not_told_to_skip_it():
    # KAI's podgrouper writes pod-group-name on every pod it groups (pkg/common/constants: PodGroupAnnotationForPod)
    grouped = copy.deepcopy(HALF)
    grouped["metadata"]["annotations"]["pod-group-name"] = "pg-half-1234"
    grouped["metadata"]["ownerReferences"] = [{"kind": "RayCluster", "name": "rc", "uid": "u", "controller": True}]
    assert [f.rule for f in wr.lint([grouped], queues=TREE)] == ["pod-group-skip"]        # as a manifest
    assert wr.lint([wr.live_view(grouped)], queues=TREE) == []                           # as KAI left it
    # a dump of live pods (docs/developer/designs/generic-pod-grouping/pods.yaml): status and uid say so
    dumped = dict(copy.deepcopy(grouped), status={"phase": "Running"})
    assert wr.lint([dumped], queues=TREE) == []
    joined = copy.deepcopy(grouped)
    joined["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] = "true"
    assert wr.live_view(joined)["metadata"]["annotations"]["pod-group-name"] == "pg-half-1234"


def test_a_controllers_pod_is_not_asked_for_a_queue_label():
    # default_grouper.go: the queue comes from the top owner's label first
    owned = copy.deepcopy(HALF)
    owned["metadata"]["labels"] = {}
    owned["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "u", "controller": True}]
    assert wr.lint([owned], queues=TREE) == []
    del owned["metadata"]["ownerReferences"]
    assert [f.rule for f in wr.lint([owned], queues=TREE)] == ["queue-label-missing"]


@pytest.mark.parametrize("where", ["top", "jobTemplate"])
def test_skip_podgrouper_anywhere_on_a_cronjobs_owner_chain(where):
    # KAI checks every owner of the pod (shouldSkipAnyOwner): the CronJob, or the Job its jobTemplate makes
    job = joining_job(skip=None)
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "gpu-trial"},
            "spec": {"schedule": "0 1 * * *", "jobTemplate": {"metadata": {}, "spec": job["spec"]}}}
    holder = cron if where == "top" else cron["spec"]["jobTemplate"]
    assert [f.rule for f in wr.lint([cron], queues=TREE)] == ["pod-group-skip"]
    holder["metadata"]["annotations"] = {"kai.scheduler/skip-podgrouper": "true"}
    assert wr.lint([cron], queues=TREE) == []


def test_skip_podgrouper_on_a_jobsets_replicated_job():
    job = joining_job(skip=None)
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": "gpu-trial"},
              "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1,
                                           "template": {"metadata": {"annotations": {
                                               "kai.scheduler/skip-podgrouper": "yes"}}, "spec": job["spec"]}}]}}
    found = wr.lint([jobset], queues=TREE)
    assert [(f.rule, f.field) for f in found] == [
        ("pod-group-skip", "spec.replicatedJobs[0].template.metadata.annotations[kai.scheduler/skip-podgrouper]")]
    jobset["spec"]["replicatedJobs"][0]["template"]["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] = "true"
    assert wr.lint([jobset], queues=TREE) == []


def test_a_job_whose_parallelism_is_not_a_number_is_not_sized():
    # min("2", 3) raised TypeError before the Job's size had one home (_at_once)
    job = joining_job(parallelism="2")
    job["spec"]["completions"] = 3
    job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "2"
    assert [f.rule for f in wr.lint([podgroup(minMember=5), job], queues=TREE)] == []


# ---------------------------------------------------------------- RayService and LeaderWorkerSet
def rayservice(worker=None, min_replicas=1, replicas=2):
    """A KubeRay RayService: its cluster spec under spec.rayClusterConfig (KAI's plugins/ray/
    rayservice_grouper.go groups its pods by the RayCluster its status names)."""
    cluster = raycluster(worker=worker, min_replicas=min_replicas, replicas=replicas)
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": cluster["metadata"],
            "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster["spec"]}}


def leaderworkerset(leader=None, worker=None, policy=None, top_annotations=None):
    """A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): groups of one leader and size-1 workers, the queue
    label on the set (KAI's plugins/leaderworkerset/lws_grouper.go: the gang is spec.replicas groups)."""
    spec = {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": worker or template()}}
    if leader is not None:
        spec["leaderWorkerTemplate"]["leaderTemplate"] = leader
    if policy is not None:
        spec["startupPolicy"] = policy
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": "gpu-trial", "labels": {"kai.scheduler/queue": "ml-team"},
                         "annotations": dict(top_annotations or {})},
            "spec": spec}


@pytest.mark.parametrize("obj", [rayservice(), leaderworkerset(), leaderworkerset(leader=template(gpus=0),
                                                                                  policy="LeaderReady")],
                         ids=["rayservice", "lws", "lws-leader-ready"])
def test_rayservice_and_leaderworkerset_shapes_pass(obj):
    assert rules([obj]) == []


def test_a_rayservice_worker_is_checked_and_sized():
    found = rules([rayservice(worker=template(annotations={"gpu-fraction": "0.5"}, gpus=1), min_replicas=3)])
    base = "spec.rayClusterConfig.workerGroupSpecs[0]"
    assert ("fraction-with-whole-gpu", "error",
            base + ".template.spec.containers[0].resources.limits[nvidia.com/gpu]") in found
    assert ("group-sizes", "error", base + ".minReplicas") in found


def test_both_leaderworkerset_templates_are_checked():
    found = rules([leaderworkerset(leader=template(scheduler=None), worker=template(annotations={"gpu-fraction": "2"}))])
    assert ("scheduler-name", "error", "spec.leaderWorkerTemplate.leaderTemplate.spec.schedulerName") in found
    assert ("gpu-fraction-range", "error",
            "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[gpu-fraction]") in found


def test_a_leaderworkerset_startup_policy_the_podgrouper_does_not_know():
    assert rules([leaderworkerset(policy="LeaderFirst")]) == [("group-sizes", "error", "spec.startupPolicy")]


def test_batch_min_member_on_a_leaderworkerset_is_ignored_by_its_podgrouper():
    found = wr.lint([leaderworkerset(top_annotations={"kai.scheduler/batch-min-member": "3"})], queues=TREE)
    assert [(f.rule, f.severity) for f in found] == [("min-member-ignored", "warning")]
    assert "spec.replicas" in found[0].message

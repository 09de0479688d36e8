# Apache-2.0
"""Every lint rule: a manifest that passes it and each way to break it, with
the exact field and message the user reads."""
import copy

import pytest
import yaml

from ansible_collections.smshare.kai.plugins.module_utils import workload_rules as wr

TREE = [{"name": "research"}, {"name": "ml-team", "parent": "research"}, {"name": "default-queue"}]


# the guide's smoke-test pod: pod-level securityContext (fraction-runs-as-root)
NONROOT = {"runAsNonRoot": True, "runAsUser": 1000}


def pod(annotations=None, labels=None, scheduler="kai-scheduler", containers=None, name="half-gpu",
        security="nonroot"):
    """The KAI docs' half-GPU pod; security: its pod-level securityContext ("nonroot": the guide's, None: none)."""
    security = NONROOT if security == "nonroot" else security
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "gpu-trial",
                        "labels": {"kai.scheduler/queue": "ml-team"} if labels is None else labels,
                        "annotations": {"gpu-fraction": "0.5"} if annotations is None else annotations},
           "spec": {"containers": containers or [{"name": "gpu-workload", "image": "cuda"}]}}
    if scheduler:
        obj["spec"]["schedulerName"] = scheduler
    if security is not None:
        obj["spec"]["securityContext"] = copy.deepcopy(security)
    return obj


def job(min_member=None, parallelism=6, completions=None, template_labels=None, top_labels=None,
        top_annotations=None, scheduler="kai-scheduler"):
    obj = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train-gang", "namespace": "gpu-trial", "annotations": dict(top_annotations or {}),
                        "labels": dict(top_labels or {})},
           "spec": {"template": {
               "metadata": {"labels": {"kai.scheduler/queue": "ml-team"} if template_labels is None
                            else template_labels},
               "spec": {"restartPolicy": "Never",
                        "containers": [{"name": "worker", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    if scheduler:
        obj["spec"]["template"]["spec"]["schedulerName"] = scheduler
    if parallelism is not None:
        obj["spec"]["parallelism"] = parallelism
    if completions is not None:
        obj["spec"]["completions"] = completions
    if min_member is not None:
        obj["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = min_member
    return obj


def found(obj, queues=None, tree=True):
    queues = TREE if queues is None and tree else queues
    return [(f.rule, f.field, f.message) for f in wr.lint([obj], queues=queues)]


def only(obj, queues=None, tree=True):
    result = found(obj, queues, tree)
    assert len(result) == 1, result
    return result[0]


# ---------------------------------------------------------------- valid
def test_the_documents_half_gpu_pod_only_warns_that_it_may_run_as_root():
    # the notes' half-GPU example has no securityContext: the image's USER decides
    findings = wr.lint([pod(security=None)], queues=TREE)
    assert [(f.rule, f.severity, f.field) for f in findings] == [
        ("fraction-runs-as-root", "warning", "spec.securityContext.runAsNonRoot")]


def test_the_documents_half_gpu_pod_with_the_guides_security_context_passes():
    assert found(pod()) == []


def test_the_documents_gang_job_passes():
    assert found(job(min_member="2")) == []


def test_every_rule_is_listed_with_a_severity():
    assert set(rule[0] for rule in wr.RULES.values()) == {"error", "warning"}


def test_plain_workloads_are_left_alone():
    plain = {"kind": "Deployment", "metadata": {"name": "web"},
             "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}}}
    assert found(plain) == [] and found({"kind": "ConfigMap", "metadata": {"name": "x"}}) == []


# ---------------------------------------------------------------- scheduler-name
def test_kai_annotation_without_the_scheduler():
    rule, where, message = only(pod(scheduler=None, labels={}))
    assert (rule, where) == ("scheduler-name", "spec.schedulerName")
    assert message == ("is unset but the pod uses KAI (annotation gpu-fraction): the default scheduler places it "
                       "and ignores them; set schedulerName: kai-scheduler")


def test_queue_label_with_another_scheduler():
    rule, where, message = only(pod(annotations={}, scheduler="default-scheduler"))
    assert (rule, where) == ("scheduler-name", "spec.schedulerName")
    assert message.startswith("is 'default-scheduler' but the pod uses KAI (label kai.scheduler/queue)")


def test_gang_job_without_the_scheduler_names_the_template_field():
    rule, where, message = only(job(min_member="2", scheduler=None))
    assert (rule, where) == ("scheduler-name", "spec.template.spec.schedulerName")
    assert "label kai.scheduler/queue, annotation kai.scheduler/batch-min-member" in message


def test_many_reasons_are_shortened():
    annotations = {"gpu-fraction": "0.5", "kai.scheduler/a": "1", "kai.scheduler/b": "1", "kai.scheduler/c": "1"}
    message = only(pod(annotations=annotations, labels={}, scheduler=None))[2]
    assert "and 1 more" in message


# ---------------------------------------------------------------- fraction values
@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.5", "half", "", "50%", "0x1"])
def test_gpu_fraction_out_of_range(value):
    rule, where, message = only(pod(annotations={"gpu-fraction": value}))
    assert (rule, where) == ("gpu-fraction-range", "metadata.annotations[gpu-fraction]")
    assert message == ("%r must be a number greater than 0 and less than 1 (for example \"0.5\"); for whole GPUs "
                       "request nvidia.com/gpu in the container's resources.limits instead" % value)


@pytest.mark.parametrize("value", ["0.5", ".25", "0.999", "5e-1"])
def test_gpu_fraction_in_range(value):
    assert found(pod(annotations={"gpu-fraction": value})) == []


@pytest.mark.parametrize("value", ["4Gi", "0", "-1", "4096.5", "lots"])
def test_gpu_memory_not_a_positive_whole_number(value):
    rule, where, message = only(pod(annotations={"gpu-memory": value}))
    assert (rule, where) == ("gpu-memory-value", "metadata.annotations[gpu-memory]")
    assert message == "%r must be a positive whole number of MiB (for example \"4096\"), without a unit" % value


def test_gpu_memory_passes():
    assert found(pod(annotations={"gpu-memory": "4096"})) == []


def test_fraction_and_memory_together():
    rule, where, message = only(pod(annotations={"gpu-fraction": "0.5", "gpu-memory": "4096"}))
    assert (rule, where) == ("fraction-and-memory", "metadata.annotations")
    assert message == "sets both gpu-fraction and gpu-memory: a pod asks for a share of a GPU one way, remove one of them"


def test_num_devices():
    assert found(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"})) == []
    rule, where, message = only(pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "two"}))
    assert (rule, where) == ("num-devices", "metadata.annotations[gpu-fraction-num-devices]")
    assert message == "'two' must be a positive whole number of GPUs (for example \"2\")"
    rule, _where, message = only(pod(annotations={"gpu-fraction-num-devices": "2"}))
    assert rule == "num-devices"
    assert message == "spreads a share over 2 devices but sets neither gpu-fraction nor gpu-memory: add the share"


# ---------------------------------------------------------------- containers
def test_fractional_pod_that_also_requests_a_whole_gpu():
    containers = [{"name": "gpu-workload", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
    rule, where, message = only(pod(containers=containers))
    assert (rule, where) == ("fraction-with-whole-gpu", "spec.containers[0].resources.limits[nvidia.com/gpu]")
    assert message == ("container 'gpu-workload' requests a whole nvidia.com/gpu in a pod that asks for a GPU share "
                       "(gpu-fraction): KAI refuses the pod; drop the whole-GPU request or the share")


def test_whole_gpu_in_an_init_container_counts_too():
    obj = pod(annotations={"gpu-memory": "2000"})
    obj["spec"]["initContainers"] = [{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
    rule, where, message = only(obj)
    assert where == "spec.initContainers[0].resources.requests[nvidia.com/gpu]" and "(gpu-memory)" in message


def test_two_containers_asking_for_a_share():
    containers = [{"name": "main"}, {"name": "side"}]
    annotations = {"gpu-fraction": "0.5", "nvidia.com/container.side.gpu-memory.request": "4096Mi"}
    rule, where, message = only(pod(annotations=annotations, containers=containers))
    assert (rule, where) == ("one-fractional-container", "metadata.annotations")
    assert message == ("2 containers ask for a GPU share (main via gpu-fraction, side via "
                       "nvidia.com/container.side.gpu-memory.request): only one container of a pod may; keep the "
                       "share on one and give the others none")


def test_the_seed_smoke_pod_with_compute_mode_on_the_same_container_passes():
    annotations = {"gpu-fraction": "0.5", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}
    assert found(pod(annotations=annotations, containers=[{"name": "main"}])) == []


def test_fraction_container_name_moves_the_share():
    containers = [{"name": "sidecar"}, {"name": "gpu-workload"}]
    annotations = {"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-workload",
                   "nvidia.com/container.gpu-workload.gpu-memory.limit": "8Gi"}
    assert found(pod(annotations=annotations, containers=containers)) == []


def test_annotations_that_name_a_missing_container():
    annotations = {"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}
    rule, where, message = only(pod(annotations=annotations))
    assert (rule, where) == ("unknown-container", "metadata.annotations[gpu-fraction-container-name]")
    assert message == "names container 'gpu' but the pod's containers are 'gpu-workload'"
    annotations = {"gpu-fraction": "0.5", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}
    result = found(pod(annotations=annotations))
    assert ("unknown-container", "metadata.annotations[nvidia.com/container.main.gpu-compute.mode]",
            "names container 'main' but the pod's containers are 'gpu-workload': the setting applies to nothing"
            ) in result


@pytest.mark.parametrize("request_, limit, message", [
    ("4096", "8Gi", None),
    ("4Gi", "4096Mi", None),
    ("lots", None, "'lots' must be a positive Kubernetes quantity of memory (for example 4096Mi)"),
    ("0", None, "'0' must be a positive Kubernetes quantity of memory (for example 4096Mi)"),
    ("8Gi", "4Gi", "limit 4Gi is below the request 8Gi for container 'main'"),
])
def test_nvfractions_memory_quantities(request_, limit, message):
    annotations = {"nvidia.com/container.main.gpu-memory.request": request_}
    if limit:
        annotations["nvidia.com/container.main.gpu-memory.limit"] = limit
    result = found(pod(annotations=annotations, containers=[{"name": "main"}]))
    if message is None:
        assert result == []
    else:
        assert [r[2] for r in result] == [message] and result[0][0] == "nvfractions-quantity"


def test_user_set_devices_annotation():
    annotations = {"gpu-fraction": "0.5", "nvidia.com/container.gpu-workload.gpus.devices": "GPU-1234"}
    rule, where, message = only(pod(annotations=annotations))
    assert (rule, where) == ("reserved-annotation",
                             "metadata.annotations[nvidia.com/container.gpu-workload.gpus.devices]")
    assert message == ("is written by KAI's binder when it places the pod; users may not set it (admission rejects "
                       "the pod): remove it")


# ---------------------------------------------------------------- placement
def test_pod_annotation_on_the_workload_itself():
    obj = job(top_annotations={"gpu-fraction": "0.5"})
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    rule, where, message = only(obj)
    assert (rule, where) == ("annotation-placement", "metadata.annotations[gpu-fraction]")
    assert message == ("is on the Job itself, where KAI does not read it: move it to the pod template's "
                       "metadata.annotations (spec.template.metadata.annotations)")


def test_cronjob_template_is_checked():
    obj = {"kind": "CronJob", "metadata": {"name": "nightly"}, "spec": {"jobTemplate": {"spec": {"template": {
        "metadata": {"annotations": {"gpu-fraction": "2"}}, "spec": {"containers": [{"name": "c"}]}}}}}}
    rules = [f[:2] for f in found(obj)]
    assert ("gpu-fraction-range", "spec.jobTemplate.spec.template.metadata.annotations[gpu-fraction]") in rules
    assert ("scheduler-name", "spec.jobTemplate.spec.template.spec.schedulerName") in rules


# ---------------------------------------------------------------- queues
def test_old_runai_queue_label():
    result = found(pod(labels={"runai/queue": "ml-team"}))
    assert ("legacy-queue-label", "metadata.labels[runai/queue]",
            "is the old Run:ai label; KAI reads kai.scheduler/queue: rename it") in result


def test_missing_queue_label_is_a_warning_when_default_queue_is_a_leaf():
    findings = wr.lint([pod(labels={})], queues=TREE)
    assert [(f.rule, f.severity, f.field, f.message) for f in findings] == [
        ("queue-label-missing", "warning", "metadata.labels",
         "has no kai.scheduler/queue label, so KAI puts the pod in 'default-queue': name the team's leaf queue")]
    assert [f.rule for f in wr.lint([pod(labels={})])] == ["queue-label-missing"]


def test_missing_queue_label_is_an_error_when_default_queue_cannot_run_it():
    rule, _where, message = only(pod(labels={}), queues=[{"name": "research"}])
    assert rule == "queue-unknown"
    assert message == ("has no kai.scheduler/queue label, so KAI puts the pod in 'default-queue', which is not a "
                       "queue of the tree: label the pod with a leaf queue")
    rule, _where, message = only(pod(labels={}), queues=[{"name": "default-queue"}, {"name": "x", "parent": "default-queue"}])
    assert rule == "queue-not-leaf" and "which is not a leaf queue" in message


def test_queue_that_is_not_in_the_tree():
    rule, where, message = only(pod(labels={"kai.scheduler/queue": "ml"}))
    assert (rule, where) == ("queue-unknown", "metadata.labels[kai.scheduler/queue]")
    assert message == "names queue 'ml', which is not a queue of the tree (known: default-queue, ml-team, research)"


def test_queue_that_is_not_a_leaf():
    rule, where, message = only(pod(labels={"kai.scheduler/queue": "research"}))
    assert (rule, where) == ("queue-not-leaf", "metadata.labels[kai.scheduler/queue]")
    assert message == ("names queue 'research', which has child queues (ml-team): only leaf queues run jobs, so the "
                       "pod would never be scheduled; use one of them")


def test_queue_rules_also_take_queue_objects_and_are_skipped_without_a_tree():
    objects = [{"kind": "Queue", "metadata": {"name": "research"}, "spec": {}},
               {"kind": "Queue", "metadata": {"name": "ml-team"}, "spec": {"parentQueue": "research"}}]
    assert only(pod(labels={"kai.scheduler/queue": "research"}), queues=objects)[0] == "queue-not-leaf"
    assert found(pod(labels={"kai.scheduler/queue": "anything"}), tree=False) == []


def test_workload_label_wins_over_the_pods():
    obj = job(top_labels={"kai.scheduler/queue": "research"})
    result = found(obj)
    assert ("queue-label-conflict", "spec.template.metadata.labels[kai.scheduler/queue]",
            "is 'ml-team' but the Job's own label says 'research', and KAI takes the workload's: make them agree"
            ) in result
    assert ("queue-not-leaf", "metadata.labels[kai.scheduler/queue]") in [f[:2] for f in result]


# ---------------------------------------------------------------- gangs
def test_min_member_larger_than_parallelism():
    rule, where, message = only(job(min_member="8", parallelism=6))
    assert (rule, where) == ("min-member-too-large", "metadata.annotations[kai.scheduler/batch-min-member]")
    assert message == ("asks for 8 pods together but at most 6 run at once (spec.parallelism is 6): the gang can "
                       "never form and no pod starts; lower the annotation or raise the parallelism")


def test_min_member_against_the_default_parallelism_and_completions():
    assert "(spec.parallelism is 1)" in only(job(min_member="2", parallelism=None))[2]
    assert "(spec.completions is 3)" in only(job(min_member="4", parallelism=6, completions=3))[2]
    assert found(job(min_member="6", parallelism=6, completions=6)) == []


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_min_member_not_a_positive_whole_number(value):
    rule, where, message = only(job(min_member=value))
    assert (rule, message) == ("min-member-value", "%r must be a positive whole number of pods" % value)


def test_jobset_levels():
    rjob = {"name": "workers", "template": {"metadata": {"annotations": {"kai.scheduler/batch-min-member": "5"}},
                                            "spec": {"parallelism": 4, "template": {
                                                "metadata": {"labels": {"kai.scheduler/queue": "ml-team"}},
                                                "spec": {"schedulerName": "kai-scheduler",
                                                         "containers": [{"name": "w"}]}}}}}
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "js", "annotations": {"kai.scheduler/batch-min-member": "2"}},
        "spec": {"replicatedJobs": [rjob]}}
    result = found(obj)
    assert [f[:2] for f in result] == [
        ("min-member-too-large", "metadata.annotations[kai.scheduler/batch-min-member]"),
        ("min-member-too-large", "spec.replicatedJobs[0].template.metadata.annotations[kai.scheduler/batch-min-member]")]
    assert result[0][2] == "asks for 2 replicated jobs together but the JobSet has 1: it would never start"
    assert "(spec.replicatedJobs[0].template.spec.parallelism is 4)" in result[1][2]
    bad = copy.deepcopy(obj)
    bad["spec"]["replicatedJobs"][0]["template"]["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "x"
    assert "min-member-value" in [f[0] for f in found(bad)]
    obj["metadata"]["annotations"] = {}
    obj["spec"]["replicatedJobs"][0]["template"]["metadata"]["annotations"] = {}
    assert found(obj) == []


# ---------------------------------------------------------------- fraction-runs-as-root
RISK = ("MPS lets root raise its own cap or delete a neighbour's namespace")
FIX_NONROOT = "set securityContext.runAsNonRoot: true (and a non-zero runAsUser)"
FIX_UID = "set a non-zero runAsUser and securityContext.runAsNonRoot: true"


def with_security(obj, pod_level=None, **containers):
    """obj with the pod's securityContext (None: none) and containers' (by name)."""
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


def deployment(annotations=None):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "gpu-trial"},
            "spec": {"template": {
                "metadata": {"labels": {"kai.scheduler/queue": "ml-team"},
                             "annotations": {"gpu-fraction": "0.5"} if annotations is None else annotations},
                "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "gpu-workload"}]}}}}


def jobset():
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
            "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {
                "metadata": {"labels": {"kai.scheduler/queue": "ml-team"}, "annotations": {"gpu-fraction": "0.5"}},
                "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "w"}]}}}}}]}}


SIDECAR = [{"name": "gpu-workload"}, {"name": "sidecar"}]
NAMED_SECOND = {"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}
NVFRACTIONS = {"nvidia.com/container.main.gpu-memory.request": "4Gi"}
BARE = pod(security=None)
ROOT_CASES = [
    # (id, object, [(severity, field)])
    ("the guide's pod: pod-level runAsNonRoot true and runAsUser 1000", pod(), []),
    ("pod-level runAsNonRoot true alone", with_security(BARE, {"runAsNonRoot": True}), []),
    ("container-level runAsNonRoot true", with_security(BARE, None, **{"gpu-workload": {"runAsNonRoot": True}}), []),
    ("runAsUser 1000 without runAsNonRoot: the kubelet runs uid 1000",
     with_security(BARE, {"runAsUser": 1000}), []),
    ("runAsUser 1000 on the container, runAsNonRoot false on the pod",
     with_security(BARE, {"runAsNonRoot": False}, **{"gpu-workload": {"runAsUser": 1000}}), []),
    ("no securityContext: may be root", BARE, [("warning", "spec.securityContext.runAsNonRoot")]),
    ("only other settings", with_security(BARE, {"fsGroup": 1000}, **{"gpu-workload": {"privileged": False}}),
     [("warning", "spec.securityContext.runAsNonRoot")]),
    ("explicit runAsNonRoot false on the pod", with_security(BARE, {"runAsNonRoot": False}),
     [("error", "spec.securityContext.runAsNonRoot")]),
    ("explicit runAsNonRoot false on the container overrides the pod's true",
     with_security(BARE, {"runAsNonRoot": True}, **{"gpu-workload": {"runAsNonRoot": False}}),
     [("error", "spec.containers[0].securityContext.runAsNonRoot")]),
    ("the container's runAsUser 0 overrides the pod's nonroot context",
     with_security(BARE, NONROOT, **{"gpu-workload": {"runAsUser": 0}}),
     [("error", "spec.containers[0].securityContext.runAsUser")]),
    ("runAsUser 0 and runAsNonRoot true: still root, the kubelet refuses it",
     with_security(BARE, None, **{"gpu-workload": {"runAsUser": 0, "runAsNonRoot": True}}),
     [("error", "spec.containers[0].securityContext.runAsUser")]),
    ("pod-level runAsUser 0", with_security(BARE, {"runAsUser": 0, "runAsNonRoot": True}),
     [("error", "spec.securityContext.runAsUser")]),
    ("the container's runAsUser 1000 overrides the pod's 0",
     with_security(BARE, {"runAsUser": 0, "runAsNonRoot": True}, **{"gpu-workload": {"runAsUser": 1000}}), []),
    ("a non-fractional pod as root is not this rule's",
     with_security(pod(annotations={}), {"runAsUser": 0}), []),
    ("a plain pod as root", with_security({"kind": "Pod", "metadata": {"name": "p"},
                                           "spec": {"containers": [{"name": "c"}]}}, {"runAsUser": 0}), []),
    ("a Deployment's template without securityContext", deployment(),
     [("warning", "spec.template.spec.securityContext.runAsNonRoot")]),
    ("a Deployment's template as root", with_security(deployment(), None, **{"gpu-workload": {"runAsUser": 0}}),
     [("error", "spec.template.spec.containers[0].securityContext.runAsUser")]),
    ("a Deployment's template with the guide's context", with_security(deployment(), NONROOT), []),
    ("a JobSet's pod template", jobset(),
     [("warning", "spec.replicatedJobs[0].template.spec.template.spec.securityContext.runAsNonRoot")]),
    ("gpu-memory is fractional too", pod(annotations={"gpu-memory": "4096"}, security=None),
     [("warning", "spec.securityContext.runAsNonRoot")]),
    ("NvFractions memory annotations are fractional too",
     pod(annotations=NVFRACTIONS, containers=[{"name": "main"}], security=None),
     [("warning", "spec.securityContext.runAsNonRoot")]),
    ("a sidecar as root beside a non-root fraction container",
     with_security(pod(containers=SIDECAR), NONROOT, sidecar={"runAsUser": 0}),
     [("error", "spec.containers[1].securityContext.runAsUser")]),
    ("an init container as root", with_security(
        dict(pod(), spec=dict(pod()["spec"], initContainers=[{"name": "warm"}])), NONROOT, warm={"runAsUser": 0}),
     [("error", "spec.initContainers[0].securityContext.runAsUser")]),
    ("pod-level runAsUser 0 with both containers inheriting it: one finding",
     with_security(pod(containers=SIDECAR), {"runAsUser": 0}), [("error", "spec.securityContext.runAsUser")]),
    ("the fraction container (first) is non-root, the sidecar leaves it open: only the share counts",
     with_security(pod(containers=SIDECAR), None, **{"gpu-workload": {"runAsNonRoot": True}}), []),
    ("the fraction container (first) leaves it open, the sidecar is non-root",
     with_security(pod(containers=SIDECAR), None, sidecar={"runAsNonRoot": True}),
     [("warning", "spec.securityContext.runAsNonRoot")]),
    ("gpu-fraction-container-name moves the share to the sidecar, which is non-root",
     with_security(pod(annotations=NAMED_SECOND, containers=SIDECAR), None, sidecar={"runAsNonRoot": True}), []),
    ("gpu-fraction-container-name names the sidecar, which runs runAsNonRoot false",
     with_security(pod(annotations=NAMED_SECOND, containers=SIDECAR), None,
                   **{"gpu-workload": {"runAsNonRoot": True}, "sidecar": {"runAsNonRoot": False}}),
     [("error", "spec.containers[1].securityContext.runAsNonRoot")]),
]


@pytest.mark.parametrize("obj, expected", [case[1:] for case in ROOT_CASES], ids=[case[0] for case in ROOT_CASES])
def test_fraction_runs_as_root(obj, expected):
    findings = wr.lint([obj], queues=TREE)
    assert [(f.severity, f.field) for f in findings if f.rule == "fraction-runs-as-root"] == expected
    assert [f for f in findings if f.rule != "fraction-runs-as-root"] == []


def test_fraction_runs_as_root_messages():
    assert found(BARE) == [(
        "fraction-runs-as-root", "spec.securityContext.runAsNonRoot",
        "is not set on the pod nor on container 'gpu-workload', and no non-zero runAsUser is: the image's USER "
        "decides, which the manifest does not show, so it may run as root in a pod that asks for a GPU share "
        "(gpu-fraction for container 'gpu-workload'): %s: %s" % (RISK, FIX_NONROOT))]
    assert found(with_security(BARE, {"runAsNonRoot": False})) == [(
        "fraction-runs-as-root", "spec.securityContext.runAsNonRoot",
        "is false and no non-zero runAsUser is set, so container 'gpu-workload' may run as root in a pod that asks "
        "for a GPU share (gpu-fraction for container 'gpu-workload'): %s: %s" % (RISK, FIX_NONROOT))]
    assert found(with_security(pod(containers=SIDECAR), NONROOT, sidecar={"runAsUser": 0})) == [(
        "fraction-runs-as-root", "spec.containers[1].securityContext.runAsUser",
        "is 0, so container 'sidecar' runs as root in a pod that asks for a GPU share (gpu-fraction for container "
        "'gpu-workload'): %s: %s" % (RISK, FIX_UID))]
    assert found(with_security(pod(containers=SIDECAR), {"runAsUser": 0}))[0][2].startswith(
        "is 0, so containers 'gpu-workload' and 'sidecar' run as root in a pod")
    nvf = found(pod(annotations=NVFRACTIONS, containers=[{"name": "main"}], security=None))[0][2]
    assert "(nvidia.com/container.main.gpu-memory.request for container 'main')" in nvf


def test_fraction_runs_as_root_severities():
    assert wr.RULES["fraction-runs-as-root"][0] == "error"
    assert [f.severity for f in wr.lint([BARE])] == ["warning"]
    assert [f.severity for f in wr.lint([with_security(BARE, {"runAsUser": 0})])] == ["error"]
    assert wr.report(wr.lint([BARE]))[0].startswith(
        "WARNING: Pod gpu-trial/half-gpu: spec.securityContext.runAsNonRoot: is not set")


def test_a_container_the_share_names_but_the_pod_lacks_falls_back_to_the_pod_level():
    annotations = {"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}
    result = found(pod(annotations=annotations, security=None))
    assert [r[:2] for r in result] == [("unknown-container", "metadata.annotations[gpu-fraction-container-name]"),
                                       ("fraction-runs-as-root", "spec.securityContext.runAsNonRoot")]
    assert "nor on the container that gets the share" in result[1][2]
    assert found(pod(annotations=annotations))[0][0] == "unknown-container"
    assert len(found(pod(annotations=annotations))) == 1


def test_the_collections_own_smoke_test_pod_passes():
    from ansible_collections.smshare.kai.plugins.module_utils import smoke_checks
    manifest = smoke_checks.pod_manifest("fraction-smoke-a", "gpu-trial", "ml-team", 0.5, "cuda")
    assert [f for f in wr.lint([manifest], queues=TREE) if f.rule == "fraction-runs-as-root"] == []


# ---------------------------------------------------------------- output and files
def test_list_objects_are_expanded():
    listed = {"kind": "List", "items": [pod(annotations={"gpu-fraction": "2"}), {"kind": "List", "items": [pod()]}]}
    assert [f.rule for f in wr.lint([listed, None, {}])] == ["gpu-fraction-range"]


def test_finding_text_and_report_order():
    findings = wr.lint([pod(labels={}, name="a"), pod(annotations={"gpu-memory": "x"}, name="b")], source="k8s.yaml")
    lines = wr.report(findings)
    assert lines == [
        "ERROR: k8s.yaml: Pod gpu-trial/b: metadata.annotations[gpu-memory]: 'x' must be a positive whole number of "
        "MiB (for example \"4096\"), without a unit [gpu-memory-value]",
        "WARNING: k8s.yaml: Pod gpu-trial/a: metadata.labels: has no kai.scheduler/queue label, so KAI puts the pod "
        "in 'default-queue': name the team's leaf queue [queue-label-missing]"]
    assert wr.summary(findings, 2) == "1 error, 1 warning in 2 objects checked"
    assert wr.summary([], 1) == "0 errors, 0 warnings in 1 object checked"
    assert findings[0].as_dict()["text"] == lines[1]


def test_files_and_directories(tmp_path):
    (tmp_path / "apps" / "team").mkdir(parents=True)
    (tmp_path / "apps" / "good.yaml").write_text(yaml.safe_dump(pod()))
    (tmp_path / "apps" / "team" / "bad.yml").write_text(
        yaml.safe_dump_all([pod(annotations={"gpu-fraction": "1"}), job(min_member="9")]))
    (tmp_path / "apps" / "team" / "notes.txt").write_text("not a manifest")
    (tmp_path / "apps" / ".hidden").mkdir()
    (tmp_path / "apps" / ".hidden" / "x.yaml").write_text("{{ template }}")
    (tmp_path / "broken.json").write_text("{\"kind\": ")
    findings, checked, files = wr.lint_files([str(tmp_path / "apps"), str(tmp_path / "broken.json")],
                                             yaml.safe_load_all, (yaml.YAMLError,), queues=TREE)
    assert [f.replace(str(tmp_path) + "/", "") for f in files] == [
        "apps/good.yaml", "apps/team/bad.yml", "broken.json"]
    assert checked == 3
    by_rule = dict((f.rule, f) for f in findings)
    assert sorted(by_rule) == ["gpu-fraction-range", "min-member-too-large", "parse"]
    assert by_rule["gpu-fraction-range"].source.endswith("apps/team/bad.yml#1")
    assert by_rule["min-member-too-large"].source.endswith("apps/team/bad.yml#2")
    assert by_rule["parse"].message.startswith("is not valid YAML or JSON: ")
    assert by_rule["parse"].text().startswith("ERROR: %s: is not valid YAML" % (tmp_path / "broken.json"))


def test_a_document_that_is_not_an_object(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    findings, checked, _files = wr.lint_files([str(path)], yaml.safe_load_all, (yaml.YAMLError,))
    assert checked == 0 and [f.message for f in findings] == ["document 1 is not a Kubernetes object (a mapping)"]


def test_a_missing_path_is_an_error(tmp_path):
    with pytest.raises(OSError) as info:
        wr.manifest_files([str(tmp_path / "nope")])
    assert "no such file or directory" in str(info.value)


# ---------------------------------------------------------------- live objects
def test_live_view_drops_what_the_binder_wrote_on_bound_pods_only():
    annotations = {"gpu-fraction": "0.5", "nvidia.com/container.gpu-workload.gpus.devices": "GPU-1"}
    bound = pod(annotations=dict(annotations))
    bound["spec"]["nodeName"] = "gpu-01"
    bound["status"] = {"phase": "Running"}
    view = wr.live_view(bound)
    assert "status" not in view and found(view) == []
    assert bound["metadata"]["annotations"] == annotations  # the input is not changed
    assert [f.rule for f in wr.lint([wr.live_view(pod(annotations=annotations))])] == ["reserved-annotation"]


def test_owned_by():
    owned = pod()
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-1", "controller": True}]
    assert wr.owned_by(owned, {"ReplicaSet"}) and not wr.owned_by(owned, {"Job"})
    owned["metadata"]["ownerReferences"][0]["controller"] = False
    assert not wr.owned_by(owned, {"ReplicaSet"})


def test_nesting_past_the_pure_python_loaders_recursion_is_a_parse_finding(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 5000 + "]" * 5000)
    findings, checked, _files = wr.lint_files([str(path)], yaml.safe_load_all, (yaml.YAMLError,))
    assert checked == 0 and [(f.rule, f.message) for f in findings] == [("parse", "is nested too deeply to read")]

# -*- coding: utf-8 -*-
# Apache-2.0
"""The guide's Troubleshooting table, symptom -> cause -> fix, as data: the one
source of the messages the checks print for these rows and of the
troubleshooting page (docs/troubleshooting.md, written by
scripts/troubleshooting_page.py from `markdown()`; a unit test fails when the
page differs).

A row's `check` names what reports it, reading the row: `smoke_test` (the
fraction_smoke_test module: its why-pending diagnosis and its checks,
module_utils/smoke_checks.py) or `gpu_fractioning` (the role's verify,
module_utils/fractioning_checks.py symptoms()); None for the guide's rows no
check reports, with a `note` on what the collection does about them. The
message a check prints is `layout` filled with the row's symptom, cause and fix
(their `{placeholders}` with the values the check found); `example` gives the
placeholders' page values.

Sources: the published guide's Troubleshooting and "Adjust for your environment"
rows; the forks' behaviour as the checks' modules cite it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import string

SMOKE_TEST, GPU_FRACTIONING = "smoke_test", "gpu_fractioning"
CHECKS = {
    SMOKE_TEST: "smoke test (`smshare.kai.fraction_smoke_test`, the `smoke_test` role)",
    GPU_FRACTIONING: "`gpu_fractioning` role, verify step (`smshare.kai.release_verify_info`)",
}

ROWS = (
    # ------------------------------------------------ the smoke test's Pending diagnosis: a pod's events
    {"id": "gpu_memory_label_missing", "check": SMOKE_TEST,
     "events": ("does not include nvidia.com/gpu.memory",),
     "symptom": "a fractional pod stays Pending; its event says `does not include nvidia.com/gpu.memory`",
     "cause": "the node has no nvidia.com/gpu.memory label, so KAI's binder cannot size the memory cap and the pod "
              "stays Pending",
     "fix": "run GPU Feature Discovery (part of the GPU Operator), then check kubectl get nodes -L "
            "nvidia.com/gpu.memory",
     "layout": "{cause}: {fix}"},
    {"id": "memory_limit_hook_unsupported", "check": SMOKE_TEST,
     "events": ("failed to set memory limits", "Insufficient Permissions"),
     "symptom": "a fractional pod does not start; its event says `createRuntime hook ... failed to set memory limits "
                "... Insufficient Permissions`",
     "cause": "the container toolkit's memory-limit hook (apply-cuda-memory-limits) cannot set a limit on this node",
     "fix": "check that the driver and toolkit support it, or fall back to GPU Operator v26.7.0 with "
            "gpuOperator.minimumVersion=v26.7.0 (the cap then rests on CUDA_MPS_PINNED_DEVICE_MEM_LIMIT alone)",
     "layout": "{cause}: {fix}"},
    {"id": "mps_namespace_refused", "check": SMOKE_TEST,
     "events": ("MPS namespace",),
     "symptom": "an sm-sharing pod is refused; its event names an `MPS namespace` that could not be provisioned",
     "cause": "fractiond refused to create the sm-sharing container because its MPS namespace could not be "
              "provisioned (it fails closed rather than run uncapped)",
     "fix": "read the mpsd pod's log on the node (namespace, provision)",
     "layout": "{cause}: {fix}"},
    {"id": "reservation_pod_no_runtime_class", "check": SMOKE_TEST,
     "symptom": "fractional pods stay Pending with silent events; KAI's `gpu-reservation-*` pod in "
                "`kai-resource-reservation` fails (`unable to initialize NVML: ERROR_LIBRARY_NOT_FOUND` in its log)",
     "cause": "it has no runtimeClassName, so NVML cannot load",
     "fix": "install KAI with binder.runtimeClassName=nvidia",
     "layout": "{cause} ({fix})"},
    # ------------------------------------------------ the smoke test's binder and injection checks
    {"id": "forks_mismatched", "check": SMOKE_TEST,
     "symptom": "the binder logs `received-resource-type: \"Regular\"`; a fractional pod has no `gpus.devices` "
                "annotation and `NVIDIA_VISIBLE_DEVICES=void`",
     "cause": "the KAI-Scheduler fork and the gpu-fractioning fork are a matched pair: an upstream scheduler with "
              "the fork's node agents (or the reverse) schedules the pod but gives it no GPU",
     "fix": "rebuild and reinstall both from the pinned commits",
     "layout": "{cause}; {fix}"},
    # ------------------------------------------------ gpu_fractioning's verify: daemon logs and the config
    {"id": "mpsd_out_of_memory", "check": GPU_FRACTIONING,
     "symptom": "mpsd pod {pod} on {node} exits with CUDA_ERROR_OUT_OF_MEMORY",
     "cause": "its host-memory limit ({limit}) is too small for the node's GPUs, not GPU memory",
     "fix": "raise mpsDaemon.resources.limits.memory (gpu_fractioning_mpsd_memory_limit, smshare_mpsd_memory_limit): "
            "about 50 MiB per GPU{need}",
     "layout": "{symptom}: {cause}; {fix}",
     "example": {"pod": "`<pod>`", "node": "`<node>`", "limit": "`<limit>`", "need": ""}},
    {"id": "fractiond_not_registered", "check": GPU_FRACTIONING,
     "symptom": "fractiond pod {pod} on {node} did not register as an NRI plugin ({evidence})",
     "cause": "the NRI socket is fractioningAgent.nriSocketPath (gpu_fractioning_nri_socket_path, now {nri}) and must "
              "be a socket on the node with NRI enabled in containerd",
     "fix": "MicroK8s: {microk8s_nri} and the CRI socket linked under /opt/kai-runtime; k3s/RKE2: criSocketPath "
            "/run/k3s/containerd/containerd.sock (now {cri})",
     "layout": "{symptom}: {cause}; {fix}",
     "example": {"pod": "`<pod>`", "node": "`<node>`",
                 "evidence": "`NRI socket ... not available` in its log, or no `configured NRI plugin` line",
                 "nri": "`<socket>`", "microk8s_nri": "/var/snap/microk8s/common/run/nri.sock", "cri": "`<socket>`"}},
    {"id": "gpu_operator_version_unsupported", "check": GPU_FRACTIONING,
     "symptom": "GpuFractioningConfig default is not Ready: GPUOperatorVersionUnsupported ({evidence})",
     "cause": "The chart's gpuOperator.minimumVersion (gpu_fractioning_gpu_operator_minimum_version, "
              "smshare_gpu_operator_minimum_version, now {minimum}) is above the cluster's GPU Operator",
     "fix": "upgrade the GPU Operator to it, or set v26.7.0 to run with the MPS-only memory cap "
            "(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, which a process in the container can change), or \"\" to skip the "
            "check",
     "layout": "{symptom}. {cause}: {fix}",
     "example": {"evidence": "`<the condition's message>`", "minimum": "`<version>`"}},
    # ------------------------------------------------ the guide's rows no check reports
    {"id": "images_not_pushed", "check": None,
     "symptom": "the registry is empty after `make build push` (make exits 0; \"No output specified with "
                "docker-container driver\")",
     "cause": "no `--push` argument: a docker-container builder keeps the images in its cache",
     "fix": "build with `DOCKER_BUILDX_ADDITIONAL_ARGS=--push`",
     "note": "the `fork_images` role always passes it (with `fork_images_push`, the default) and then checks every "
             "image in the registry"},
    {"id": "chart_dependency_missing", "check": None,
     "symptom": "`found in Chart.yaml, but missing in charts/ directory: gpu-fractioning`",
     "cause": "`helm dependency build` was skipped",
     "fix": "run `helm dependency build` in the KAI-Scheduler chart's folder before the install",
     "note": "the chart roles run it (`cluster_common`'s chart step) whenever a declared dependency is missing"},
    {"id": "images_tagged_0_0_0", "check": None,
     "symptom": "the pods run images tagged `0.0.0`",
     "cause": "an empty tag: KAI's `DOCKER_TAG` defaults to 0.0.0 and the charts fall back to appVersion",
     "fix": "build with a tag and set the same tag in both charts",
     "note": "`fork_images` tags every image with `fork_images_tag` (unset: the guide's `smshare-<KAI>-<fractioning>` "
             "pair tag) and the chart roles install that tag"},
    {"id": "mps_v3_missing", "check": None,
     "symptom": "`nvidia-cuda-mps-control -p 3 namespace --help` has no `namespace` subcommand",
     "cause": "a driver older than r615, or an MPS daemon not on protocol 3",
     "fix": "install the r615 driver (`nvidia_driver` role, or the GPU Operator's driver) and run MPS with `-p 3`",
     "note": "the `preflight` role's MPS v3 row and `mps_control`'s `failure=v3_unsupported` report it"},
    {"id": "mps_server_wedged", "check": None,
     "symptom": "MPS stops answering after repeated teardowns of fractional pods",
     "cause": "a wedged MPS server",
     "fix": "delete the mpsd pods (their DaemonSet starts them again)",
     "note": "no check detects it"},
)

BY_ID = dict((row["id"], row) for row in ROWS)


def _fill(text, values):
    return string.Formatter().vformat(text, (), values)


def message(row_id, **values):
    """The message a check prints for a row: its layout with symptom, cause and
    fix, their placeholders filled with `values`."""
    row = BY_ID[row_id]
    parts = dict((part, _fill(row[part], values)) for part in ("symptom", "cause", "fix"))
    return row["layout"].format(**parts)


def event_rows():
    """(id, words in an event's message, message) of the rows a pod's events show."""
    return tuple((row["id"], row["events"], message(row["id"])) for row in ROWS if row.get("events"))


def _cell(text):
    return re.sub(r"\s+", " ", text).replace("|", "\\|").strip()


def markdown():
    """docs/troubleshooting.md: one table per check, then the guide's rows no check reports."""
    out = ["# Troubleshooting", "",
           "<!-- Generated by scripts/troubleshooting_page.py from plugins/module_utils/troubleshooting.py;",
           "     edit the table there (tests/unit/collection/test_troubleshooting_page.py). -->", "",
           "The guide's troubleshooting rows, symptom -> cause -> fix. The checks named below print these",
           "rows' words when they meet the symptom: the smoke test's Pending diagnosis names the event rows by",
           "their `id` (its `cause`), the reservation pod's row inside `reservation_pod_failed`, and the forks'",
           "row in its binder and injection checks; the verify names its rows by their `id` (its `symptom`).",
           "`<...>` stands for a value the check fills in.", ""]
    for check, title in CHECKS.items():
        out += ["## Reported by the %s" % title, "", "| id | symptom | cause | fix |", "| --- | --- | --- | --- |"]
        for row in ROWS:
            if row["check"] == check:
                shown = dict((part, _fill(row[part], row.get("example") or {})) for part in ("symptom", "cause", "fix"))
                out.append("| `%s` | %s | %s | %s |" % (row["id"], _cell(shown["symptom"]), _cell(shown["cause"]),
                                                        _cell(shown["fix"])))
        out.append("")
    out += ["## The guide's rows no check reports", "", "| id | symptom | cause | fix | what the collection does |",
            "| --- | --- | --- | --- | --- |"]
    for row in ROWS:
        if row["check"] is None:
            out.append("| `%s` | %s | %s | %s | %s |" % (row["id"], _cell(row["symptom"]), _cell(row["cause"]),
                                                         _cell(row["fix"]), _cell(row["note"])))
    out += ["", "The `preflight` role prints its own table with a fix on each failed row (the guide's",
            "\"Cluster and Nodes\" checks); run it first: `ansible-playbook playbooks/preflight.yml -i <inventory>`.", ""]
    return "\n".join(out)

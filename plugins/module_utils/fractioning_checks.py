# -*- coding: utf-8 -*-
# Apache-2.0
"""What the gpu_fractioning role's verify reads in the fork's daemon logs and
conditions (pure functions, unit-tested alone; the release_verify_info module runs
them: module_utils/release_verify.py).

- mpsd_startup: the guide's step 4 check ("MPS must be in multi-user mode ...
  plus a line capping the default namespace at 10%"), in both forms the logs can
  take: the MPS control daemon's own text lines (the guide's `Adding server
  'shared' [multiuser enabled]`) and mpsd's structured lines, JSON (the fork's
  slog JSON handler, kai-gpu-fractioning fractioning-manager/common/configuration/
  logger.go @ 5440d2c6) or logfmt (slog's text handler): `starting MPS daemon`
  with its `args` (supervisor.go: -m only shows up there) and `capped the default
  MPS namespace as defence in depth` with `namespace` and `activeThreadPercent`
  (gpu-fractioning mpsns/manager.go @ ad0bc57).
- failing_containers, symptoms: the guide's Troubleshooting rows the verify
  meets, named from the failing pods' last log lines and the config's Ready
  condition (rows 6 and 8; GPUOperatorVersionUnsupported from gpu-fractioning
  operator/internal/controller/dependency_checker.go @ db0ba2ec)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import shlex

from ansible_collections.smshare.kai.plugins.module_utils import troubleshooting

SERVER = "shared"
DEFAULT_PERCENTAGE = 10
START_MSG = "starting MPS daemon"
CAP_MSG = "capped the default MPS namespace"
COMPONENT_LABEL = "app.kubernetes.io/component"

# slog's text handler: key=value, values bare or double-quoted with escapes.
LOGFMT_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_.-]*)=("(?:[^"\\]|\\.)*"|\S*)')


def structured(line):
    """A log line's fields: a JSON object, or slog's logfmt pairs (with msg); None otherwise."""
    text = (line or "").strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    pairs = LOGFMT_RE.findall(text)
    fields = {}
    for key, value in pairs:
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = value[1:-1]
        fields[key] = value
    return fields if "msg" in fields else None


def _args(value):
    """mpsd's `args`: a JSON list, or slog text's [-p 3 -m -f] / a plain string."""
    if isinstance(value, list):
        return [str(a) for a in value]
    text = str(value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _number(value):
    try:
        return float(str(value).strip().rstrip("%"))
    except (TypeError, ValueError):
        return None


def _text_cap(line):
    """The percentage a text line caps the default namespace at (the MPS daemon's
    "Namespace 'default' on server 'shared': active thread percentage 10", the
    guide's "capping the default namespace at 10%"), or None."""
    if not re.search(r"\bdefault\b", line, re.IGNORECASE) or not re.search(
            r"thread[ _]percentage|\bcap", line, re.IGNORECASE):
        return None
    match = (re.search(r"thread[ _]percentage\D*?([0-9]+(?:\.[0-9]+)?)", line, re.IGNORECASE)
             or re.search(r"\b([0-9]+(?:\.[0-9]+)?)\s*%", line))
    return _number(match.group(1)) if match else None


def since_last(text, pattern):
    """The lines of text from the last one matching pattern (re.search) on; all
    lines when none matches. A log file a daemon appends to across restarts is
    judged on its current run only."""
    lines = (text or "").splitlines()
    starts = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    return lines[starts[-1]:] if starts else lines


def mpsd_startup(lines, percentage=DEFAULT_PERCENTAGE, server=SERVER):
    """Did MPS start in multi-user mode with the default namespace capped?
    Returns {multiuser, default_cap, args (of the last `starting MPS daemon`, or
    None), caps (the percentages the logs cap `default` at), missing (what is
    not there, in words)}."""
    multiuser_text = False
    args = None
    caps = []
    for line in lines or []:
        line = str(line)
        fields = structured(line)
        if fields is not None:
            msg = str(fields.get("msg") or "")
            if msg == START_MSG or msg.startswith(START_MSG):
                args = _args(fields.get("args"))
            if msg.startswith(CAP_MSG) or (fields.get("namespace") == "default" and "activeThreadPercent" in fields):
                if fields.get("namespace", "default") == "default":
                    value = _number(fields.get("activeThreadPercent"))
                    if value is not None:
                        caps.append(value)
            continue
        if re.search(r"Adding server '%s' \[multiuser enabled\]" % re.escape(server), line):
            multiuser_text = True
        value = _text_cap(line)
        if value is not None:
            caps.append(value)
    multiuser = multiuser_text or (args is not None and "-m" in args)
    default_cap = float(percentage) in caps
    missing = []
    if not multiuser:
        if args is not None:
            missing.append("multi-user mode: mpsd started MPS without -m (args %s) and the MPS daemon never logged "
                           "Adding server '%s' [multiuser enabled]" % (" ".join(args), server))
        else:
            missing.append("multi-user mode: no Adding server '%s' [multiuser enabled] line and no mpsd "
                           "'starting MPS daemon' line with -m" % server)
    if not default_cap:
        if caps:
            missing.append("the default namespace cap at %g%%: it is capped at %s instead"
                           % (float(percentage), ", ".join("%g%%" % c for c in caps)))
        else:
            missing.append("the default namespace cap at %g%%: no line caps the default namespace"
                           % float(percentage))
    return {"multiuser": multiuser, "default_cap": default_cap, "args": args,
            "caps": caps, "missing": missing}


# ---------------------------------------------------------------- the current DaemonSets
def current_daemonsets(daemonsets, config=None):
    """The DaemonSets of the GpuFractioningConfig now in place: not being deleted
    and, when the config is known, owned by it (its uid). After a chart upgrade
    the hook re-creates the config and the operator replaces the DaemonSets: the
    old ones must not pass for the new."""
    uid = ((config or {}).get("metadata") or {}).get("uid")
    found = []
    for ds in daemonsets or []:
        meta = ds.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if uid and uid not in [o.get("uid") for o in meta.get("ownerReferences") or []]:
            continue
        found.append(ds)
    return found


# ---------------------------------------------------------------- failing pods
def _container_ready(pod, name):
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return bool(status.get("ready")), status
    return False, {}


def failing_containers(pods, rows=None):
    """The logs to read of the DaemonSets' pods' containers that are not ready:
    {pod, node, component, container, previous (the run before this one), reason,
    memory_limit}; a container that restarted has two entries, previous first.
    rows (daemonsets_ready's) limit the pods to those it lists as not ready."""
    wanted = None
    if rows is not None:
        wanted = set(p.get("pod") for r in rows or [] if not r.get("ok") for p in r.get("not_ready") or [])
    found = []
    for pod in pods or []:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if meta.get("deletionTimestamp") or (wanted is not None and meta.get("name") not in wanted):
            continue
        for container in spec.get("containers") or []:
            ready, status = _container_ready(pod, container.get("name"))
            if ready:
                continue
            state = status.get("state") or {}
            # A container that restarted may be in any state by the time its log
            # is read (waiting, starting again, just exited): the crash is in this
            # run's log or the one before, so both are read (symptoms joins them).
            restarted = int(status.get("restartCount") or 0) > 0
            entry = {"pod": meta.get("name"), "node": spec.get("nodeName") or "(unscheduled)",
                     "component": (meta.get("labels") or {}).get(COMPONENT_LABEL) or "",
                     "container": container.get("name"), "previous": False,
                     "reason": ((state.get("waiting") or {}).get("reason")
                                or (state.get("terminated") or {}).get("reason") or "not ready"),
                     "memory_limit": ((container.get("resources") or {}).get("limits") or {}).get("memory")}
            if restarted:
                found.append(dict(entry, previous=True))
            found.append(entry)
    return found


def _gpu_count(nodes, name):
    for node in nodes or []:
        if (node.get("metadata") or {}).get("name") == name:
            labels = (node.get("metadata") or {}).get("labels") or {}
            for value in (labels.get("nvidia.com/gpu.count"),
                          ((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")):
                try:
                    if int(float(str(value))) > 0:
                        return int(float(str(value)))
                except (TypeError, ValueError):
                    continue
    return None


def _hit(lines, pattern):
    for line in lines or []:
        if re.search(pattern, str(line)):
            return str(line).strip()
    return None


def _logs_per_container(logs):
    """(item, lines) per container: the runs read for one container (the one
    before and this one, failing_containers' two entries) as one log, oldest first."""
    joined, order = {}, []
    for result in logs or []:
        item = result.get("item") or result
        lines = result.get("log_lines")
        if lines is None:
            lines = (result.get("log") or "").splitlines()
        key = (item.get("pod"), item.get("container"))
        if key not in joined:
            order.append(key)
            joined[key] = [item, [], []]
        joined[key][1 if item.get("previous") else 2].extend(lines or [])
    return [(joined[key][0], joined[key][1] + joined[key][2]) for key in order]


def symptoms(logs=None, config=None, settings=None, nodes=None):
    """The guide's Troubleshooting rows the verify meets. logs: k8s_log results
    (each with `item` from failing_containers and `log_lines`) or plain dicts with
    the same keys; config: the GpuFractioningConfig; settings: the knobs' current
    values (mpsd_memory_limit, nri_socket_path, cri_socket_path,
    gpu_operator_minimum_version). Returns [{symptom, pod, node, evidence, message}]."""
    settings = settings or {}
    found = []
    for item, lines in _logs_per_container(logs):
        pod, node, component = item.get("pod") or "?", item.get("node") or "?", item.get("component") or ""
        if component == "mpsd" or item.get("container") == "mpsd":
            evidence = _hit(lines, r"CUDA_ERROR_OUT_OF_MEMORY")
            if evidence:
                gpus = _gpu_count(nodes, node)
                limit = item.get("memory_limit") or settings.get("mpsd_memory_limit") or "1Gi"
                need = (" (%s has %d GPUs: at least %d MiB, %dMi with headroom)" % (node, gpus, 50 * gpus, 64 * gpus)
                        if gpus else "")
                found.append({"symptom": "mpsd_out_of_memory", "pod": pod, "node": node, "evidence": evidence,
                              "message": troubleshooting.message("mpsd_out_of_memory", pod=pod, node=node,
                                                                 limit=limit, need=need)})
        if component == "fractiond" and item.get("container") in (None, "fractiond"):
            nri = settings.get("nri_socket_path") or "/var/run/nri/nri.sock"
            unavailable = _hit(lines, r"NRI socket \S+ not available")
            registered = _hit(lines, r"configured NRI plugin")
            if unavailable or not registered:
                evidence = unavailable or "no 'configured NRI plugin' line in its log"
                found.append({"symptom": "fractiond_not_registered", "pod": pod, "node": node, "evidence": evidence,
                              "message": troubleshooting.message(
                                  "fractiond_not_registered", pod=pod, node=node, evidence=evidence, nri=nri,
                                  microk8s_nri="/var/snap/microk8s/common/run/nri.sock",
                                  cri=settings.get("cri_socket_path") or "/run/containerd/containerd.sock")})
    ready = {}
    for condition in ((config or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = condition
    if ready.get("status") == "False" and ready.get("reason") == "GPUOperatorVersionUnsupported":
        minimum = settings.get("gpu_operator_minimum_version")
        found.append({"symptom": "gpu_operator_version_unsupported", "pod": None, "node": None,
                      "evidence": ready.get("message") or "",
                      "message": troubleshooting.message(
                          "gpu_operator_version_unsupported", evidence=ready.get("message") or "",
                          minimum=minimum if minimum is not None else "v26.7.1")})
    return found

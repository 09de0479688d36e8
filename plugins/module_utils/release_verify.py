# -*- coding: utf-8 -*-
# Apache-2.0
"""A chart release's verification (the guide's "Verify before moving on" for
KAI-Scheduler, step 4's "Verify" for gpu-fractioning), in one pass: each wait
polls its read until its predicate (module_utils/readiness.py) holds or its
timeout ends, in the order the checks depend on each other, and the first check
that fails ends the pass with its message. Both charts share the Deployments
check and the images check; the rest is each chart's own.

The reads go through a `reader` (the module's Kubernetes client; the unit tests'
recorded objects), so the order, the waits and the messages are tested without a
cluster. Every check returns {name, ok, rows, message}; `verify` returns them all
with the pass's {ok, failed_check, message}."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access, fractioning_checks, readiness
from ansible_collections.smshare.kai.plugins.module_utils.object_status import condition_summary, owned_pods
from ansible_collections.smshare.kai.plugins.module_utils.plain import one_line
from ansible_collections.smshare.kai.plugins.module_utils.pod_images import pod_images
from ansible_collections.smshare.kai.plugins.module_utils.text_table import text_table
from ansible_collections.smshare.kai.plugins.module_utils.workload_rules import KAI_CONFIG

CONFIG_KIND = "GpuFractioningConfig"
CONFIG_NAME = "default"
# Each chart's checks, in the order they run, and the columns of the rows the report shows.
CHECKS = {
    "kai-scheduler": ("kai_config_deployed", "deployments", "pods", "kai_config_sharing"),
    "gpu-fractioning": ("deployments", "config_api", "daemonsets_created", "daemonsets_ready", "config_ready",
                        "nodes_ready", "mpsd_startup", "images", "kai_config"),
}
# The word for an image's last path part in the advice, and the fork id in the image manifest.
IMAGES = {"kai-scheduler": ("<service>", "kai_scheduler"), "gpu-fractioning": ("<name>", "gpu_fractioning")}
REPORT_COLUMNS = {"daemonsets_ready": ["name", "component", "desired", "ready"],
                  "nodes_ready": ["node", "status", "reason", "message"],
                  "images": ["pod", "container", "service", "digest", "problem"],
                  "pods": ["pod", "container", "service", "digest", "problem"]}


class ReadError(Exception):
    """A read the cluster did not answer (its text names the request)."""


class Verify(object):
    """One pass. settings: chart (a key of CHECKS), namespace, release, timeout,
    poll_interval, deployments_hint, image_base, tag, manifest,
    image_manifest_path; kai-scheduler's gpu_sharing_mode; gpu-fractioning's
    components, cri_socket_path, nri_socket_path, node_selector,
    failure_log_lines, mps_control_log, mps_start_pattern,
    default_namespace_percentage, check_kai_config, symptom_settings."""

    def __init__(self, reader, settings, sleep=time.sleep, clock=time.monotonic):
        self.reader, self.s, self.sleep, self.clock = reader, settings, sleep, clock
        self.checks = []
        self.operators = []     # the namespace's Deployments (the first names the operator in advice)

    # ------------------------------------------------------------ reads and waits
    def read(self, *args, **kwargs):
        """A list read; a failure is a ReadError."""
        return self.reader.list(*args, **kwargs)

    def wait(self, read, predicate):
        """Poll read() until predicate(objects)['ok'] or the timeout. The last
        result, with `objects` (what the last read returned) and `failure` (its
        error, '' when it answered): a failed last read names itself."""
        def step():
            failure = ""
            try:
                objects = read()
            except ReadError as exc:
                objects, failure = [], one_line(exc)
            result = dict(readiness.after_failed_read(predicate(objects), failure), objects=objects, failure=failure)
            return result, result["ok"]
        return cluster_access.poll(step, float(self.s["timeout"]), self.s["poll_interval"], self.clock, self.sleep)[0]

    def record(self, name, result, **extra):
        self.checks.append(dict(extra, name=name, ok=bool(result["ok"]), rows=result.get("rows") or [],
                                message=result["message"]))
        return result["ok"]

    # ------------------------------------------------------------ the passes
    def run(self):
        if self.s["chart"] == "kai-scheduler":
            self.kai_scheduler()
        else:
            self.gpu_fractioning()
        return self.result()

    def deployments(self):
        """Every Deployment of the namespace Available; after a failed wait the
        namespace's pods and events name the image pulls that fail."""
        s = self.s
        namespace = s["namespace"]
        found = self.wait(lambda: self.read("apps/v1", "Deployment", namespace=namespace),
                          lambda objects: readiness.deployments_available(objects, namespace, s["timeout"],
                                                                          s.get("deployments_hint") or ""))
        if not found["ok"] and not found["failure"]:
            pods, events = (self._read_or_none("v1", kind, namespace=namespace) for kind in ("Pod", "Event"))
            found = readiness.deployments_available(found["objects"], namespace, s["timeout"],
                                                    s.get("deployments_hint") or "", pods or [], events or [])
        self.operators = found.get("objects") or []
        return self.record("deployments", found)

    def kai_scheduler(self):
        s = self.s
        namespace, timeout = s["namespace"], s["timeout"]

        # The post-install hook applies kai-config; the operator then deploys the
        # services and reports Deployed. Waiting for the Deployments alone could end
        # while only the operator's own Deployment exists.
        deployed = self.wait(self._kai_config, lambda objects: readiness.kai_config_deployed(
            objects, namespace, s["release"], timeout))
        if not self.record("kai_config_deployed", deployed):
            return
        if not self.deployments():
            return
        live = _live(self.read("v1", "Pod", namespace=namespace))
        not_running = [p["metadata"]["name"] for p in live
                       if (p.get("status") or {}).get("phase") not in ("Running", "Succeeded")]
        if not self.record("pods", self._images(pod_images(live, s["image_base"], s["tag"], s.get("manifest"),
                                                           IMAGES["kai-scheduler"][1]), not_running)):
            return
        self.record("kai_config_sharing", readiness.kai_config_sharing(deployed["objects"], s["gpu_sharing_mode"]))

    def gpu_fractioning(self):
        s = self.s
        if not self.deployments():
            return
        namespace, timeout = s["namespace"], s["timeout"]
        sockets = (s["cri_socket_path"], s["nri_socket_path"])
        api_version = self.reader.api_version_of(CONFIG_KIND)
        if api_version is None:
            self.record("config_api", readiness.result(False, [], (
                "No API of the cluster serves kind GpuFractioningConfig: the chart's CRD is missing. Check "
                "`kubectl get crd | grep -i gpufractioning` and the chart's crds/ folder and CRD upgrader hook.")))
            return
        self.record("config_api", readiness.result(True, [], "%s serves %s" % (api_version, CONFIG_KIND)))

        def read_config():
            return self.read(api_version, CONFIG_KIND, name=CONFIG_NAME)

        def read_daemonsets():
            return self.read("apps/v1", "DaemonSet", namespace=namespace)

        # After an upgrade the chart's hook deletes and re-creates the config (its
        # finalizer holds the old one until the operator tore its DaemonSets down):
        # the DaemonSets checked below are the new config's.
        found = self.wait(read_config, lambda objects: readiness.result(
            bool(objects) and not (objects[0].get("metadata") or {}).get("deletionTimestamp"), [], ""))["objects"]
        config = found[0] if found else None

        created = self.wait(read_daemonsets, lambda objects: readiness.fractioning_daemonsets_created(
            objects, config, s["components"], namespace, timeout))
        if not created["ok"] and not created["failure"]:
            # The namespace's Deployments name the operator in the advice.
            created = readiness.fractioning_daemonsets_created(
                created["objects"], config, s["components"], namespace, timeout, self.operators)
        if not self.record("daemonsets_created", created):
            return

        # Until the pods are read (after the wait) only desired == ready decides.
        ready = self.wait(read_daemonsets, lambda objects: readiness.fractioning_daemonsets_ready(
            objects, config, [], [], namespace, *sockets))
        pods = []
        if not ready["failure"]:
            daemonsets, pods = ready["objects"], self.read("v1", "Pod", namespace=namespace)
            rows = readiness.fractioning_daemonsets_ready(daemonsets, config, pods, [], namespace, *sockets)["rows"]
            symptoms = self._symptoms(fractioning_checks.failing_containers(pods, rows))
            ready = readiness.fractioning_daemonsets_ready(daemonsets, config, pods, symptoms, namespace, *sockets)
        if not self.record("daemonsets_ready", ready):
            return

        config_ready = self.wait(read_config, lambda objects: readiness.fractioning_config_ready(
            objects, s["release"], namespace, timeout, s.get("symptom_settings") or {}))
        found = config_ready["objects"]
        config = found[0] if found else None
        if not self.record("config_ready", config_ready, summary=condition_summary(config or {})):
            return

        # The node condition gates scheduling: every node the config targets must report it.
        selector = ",".join("%s=%s" % item for item in sorted(((config.get("spec") or {}).get("nodeSelector")
                                                               or {}).items()))
        nodes = self.wait(lambda: self.read("v1", "Node", label_selector=selector or None),
                          lambda objects: readiness.fractioning_nodes_ready(objects, config, timeout))
        if not self.record("nodes_ready", nodes):
            return

        live = _live(pods)
        mpsd = ([r.get("uid") for r in ready["rows"] if r.get("component") == "mpsd"] or [""])[0]
        if not self.record("mpsd_startup", self._mpsd_startup(owned_pods(live, mpsd))):
            return

        if not self.record("images", self._images(
                pod_images(live, s["image_base"], s["tag"], s.get("manifest"), IMAGES["gpu-fractioning"][1]))):
            return

        if s.get("check_kai_config", True):
            self.record("kai_config", self.wait(self._kai_config,
                                                lambda objects: readiness.kai_config_dependencies(objects, timeout)))

    def result(self):
        failed = [c for c in self.checks if not c["ok"]]
        common = {"checks": self.checks, "report": report(self.checks)}
        if failed:
            return dict(common, ok=False, failed_check=failed[0]["name"], message=failed[0]["message"])
        # One line per check (a console folds one long line where a reader would not look).
        return dict(common, ok=True, failed_check=None, message="\n".join(c["message"] for c in self.checks))

    # ------------------------------------------------------------ the parts
    def _kai_config(self):
        return self.read(*KAI_CONFIG[:2], name=KAI_CONFIG[2])

    def _read_or_none(self, *args, **kwargs):
        """A read that only adds detail to a failure: None when it fails."""
        try:
            return self.read(*args, **kwargs)
        except ReadError:
            return None

    def _symptoms(self, failing):
        """The troubleshooting rows the failing containers' last log lines show."""
        if not failing:
            return []
        nodes = self._read_or_none("v1", "Node", label_selector=self.s["node_selector"]) or []
        logs = []
        for item in failing:
            try:
                lines = self.reader.log(self.s["namespace"], item["pod"], item["container"],
                                        previous=item["previous"], tail_lines=self.s["failure_log_lines"])
            except ReadError:
                lines = []
            logs.append({"item": item, "log_lines": lines})
        return fractioning_checks.symptoms(logs, settings=self.s.get("symptom_settings") or {}, nodes=nodes)

    def _mpsd_startup(self, pods):
        """Each mpsd pod's log and its MPS control daemon's own log (its current
        run: the kubelet rotates the container log on a long-running node)."""
        s = self.s
        if not pods:
            return readiness.result(False, [], "No mpsd pod to read logs from. " + self._mpsd_advice())
        rows, misses = [], []
        for pod in pods:
            name, node = pod["metadata"]["name"], (pod.get("spec") or {}).get("nodeName") or "?"
            container = pod["spec"]["containers"][0]["name"]
            try:
                lines = self.reader.log(s["namespace"], name, container)
            except ReadError as exc:
                # Replaced or restarting since its DaemonSet was read: run again once it settled.
                return readiness.result(False, rows, "mpsd pod %s on %s: its log could not be read (%s). Run the "
                                        "checks again once the pod runs (kubectl -n %s get pods)."
                                        % (name, node, one_line(exc), s["namespace"]))
            try:
                control = self.reader.exec_(s["namespace"], name, container, ["cat", s["mps_control_log"]])
            except ReadError:
                control = ""
            lines = list(lines) + fractioning_checks.since_last(control, s["mps_start_pattern"])
            startup = fractioning_checks.mpsd_startup(lines, s["default_namespace_percentage"])
            rows.append({"pod": name, "node": node, "missing": startup["missing"]})
            misses += ["mpsd pod %s on %s never logged %s" % (name, node, m) for m in startup["missing"]]
        if misses:
            return readiness.result(False, rows, "%s. %s" % ("; ".join(misses), self._mpsd_advice()))
        return readiness.result(True, rows, (
            "mpsd on %s logs the multi-user shared server and the default namespace cap (%s%%)"
            % (", ".join(r["node"] for r in rows), s["default_namespace_percentage"])))

    def _mpsd_advice(self):
        namespace = self.s["namespace"]
        return ("Without the multi-user shared server a pod must run with the server owner's uid; without the "
                "default cap a pod given the server's pipe directory is uncapped. Check supportSmSharing "
                "(multi-user mode follows it) and mpsd's log (kubectl -n %s logs POD; %s in the pod), then "
                "restart mpsd (kubectl -n %s delete pod POD)." % (namespace, self.s["mps_control_log"], namespace))

    def _images(self, rows, not_running=()):
        """Every pod runs (kai-scheduler's pods check), each container this build's
        image at the recorded digest."""
        s = self.s
        word = IMAGES[s["chart"]][0]
        bad = [r for r in rows if not r["ok"]]
        if bad or not_running:
            problems = " ".join("%s (%s) %s." % (r["pod"], r["container"], r["problem"]) for r in bad)
            if not_running:
                problems = "Pods not Running: %s (do not continue with a pod that is not running). %s" % (
                    ", ".join(not_running), problems)
            return readiness.result(False, rows, (
                "%s Every image must be %s/%s:%s as the images role pushed and recorded it in %s: re-run the "
                "images play, then this role." % (problems.strip(), s["image_base"], word, s["tag"],
                                                  s["image_manifest_path"])))
        return readiness.result(True, rows, "%d containers run %s/%s:%s%s" % (
            len(rows), s["image_base"], word, s["tag"],
            " at the digests in " + s["image_manifest_path"] if s.get("manifest") is not None else ""))


def _live(pods):
    """The pods not being deleted (an upgrade's old pods may still terminate)."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def report(checks):
    """The lines the role prints: the DaemonSets, the config's conditions, the
    nodes' condition and the images, as far as the checks got."""
    lines = []
    for check in checks:
        if check["name"] == "config_ready":
            lines.append("GpuFractioningConfig default: %s" % check.get("summary", ""))
        elif check["name"] in REPORT_COLUMNS and check["rows"]:
            lines += text_table(check["rows"], REPORT_COLUMNS[check["name"]])
    return lines


def verify(reader, settings, sleep=time.sleep, clock=time.monotonic):
    """The pass: {ok, failed_check (the first failing check's name, or None), message, checks,
    report (report's lines)}."""
    return Verify(reader, settings, sleep, clock).run()

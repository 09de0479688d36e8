# Apache-2.0
"""How fast the workload linter reads a repository, and the queue planner a wide tree.

Generates a repository of OBJECTS Kubernetes objects (fractional Pods and
Deployments and plain Services; a tenth of the fractional ones without
schedulerName) in files of 1 to 20 documents, then prints:
- workload_lint through `ansible localhost -m smshare.kai.workload_lint` (what
  `playbooks/lint_workloads.yml` and CI run): objects per second, MB per second;
- the same rules in-process with libyaml's loader and with PyYAML's pure-Python
  one (the module takes libyaml's where PyYAML has it), to show the loader's share;
- queue_plan on one parent with 2,000 to 20,000 child queues (half of them
  live, prune on): seconds per plan.
Figures only; it never passes or fails on time.

    source scripts/env.sh && python3 benchmarks/lint_throughput.py [--objects 10000] [--rounds 3]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.smshare.kai.plugins.module_utils import queue_tree, workload_rules  # noqa: E402


def pod(i, broken):
    annotations = {"gpu-fraction": "0.5"}
    spec = {"schedulerName": "kai-scheduler", "runtimeClassName": "nvidia",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:13.4.0-base-ubuntu24.04",
                            "command": ["sleep", "infinity"]}]}
    if broken:
        del spec["schedulerName"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "frac-%05d" % i, "namespace": "team-%d" % (i % 7), "annotations": annotations,
                         "labels": {"kai.scheduler/queue": "team-%d" % (i % 7)}},
            "spec": spec}


def deployment(i, broken):
    template = pod(i, broken)
    labels = {"app": "serve-%05d" % i, "kai.scheduler/queue": "team-1"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "serve-%05d" % i, "namespace": template["metadata"]["namespace"]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": labels["app"]}},
                     "template": {"metadata": dict(template["metadata"], labels=labels), "spec": template["spec"]}}}


def service(i, _broken):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-%05d" % i, "namespace": "team-2"},
            "spec": {"selector": {"app": "serve-%05d" % i}, "ports": [{"port": 80, "targetPort": 8080}]}}


def write_repository(folder, objects, seed=7):
    rng = random.Random(seed)
    makers = [pod, pod, deployment, service]
    made, index, size = 0, 0, 0
    while made < objects:
        count = min(rng.randint(1, 20), objects - made)
        docs = [rng.choice(makers)(made + k, rng.random() < 0.1) for k in range(count)]
        path = folder / ("dir-%02d" % (index % 17)) / ("manifest-%05d.yaml" % index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        size += path.stat().st_size
        made, index = made + count, index + 1
    return index, size


def through_ansible(folder):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="true",
               ANSIBLE_INVENTORY="")
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    args = json.dumps({"paths": [str(folder)], "fail_on": "never", "sharing_mode": "NvFractions"})
    start = time.monotonic()
    proc = subprocess.run(["ansible", "localhost", "-i", "localhost,", "-c", "local", "-m", "smshare.kai.workload_lint",
                           "-a", args, "-e", "ansible_python_interpreter=" + sys.executable],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit("workload_lint failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return elapsed, result["checked"], result["error_count"] + result["warning_count"]


def in_process(folder, loader_class):
    def load(text):
        return yaml.load_all(text, Loader=loader_class)
    start = time.monotonic()
    findings, checked, _files = workload_rules.lint_files([str(folder)], load, (yaml.YAMLError,), sharing_mode="NvFractions")
    return time.monotonic() - start, checked, len(findings)


def queue_plans(sizes, rounds):
    for n in sizes:
        items = [{"name": "root", "resources": {"gpu": {"quota": n, "limit": n}}}] + [
            {"name": "team-%05d" % i, "parent": "root", "resources": {"gpu": {"quota": 1, "limit": 2}}}
            for i in range(n)]
        live = [{"apiVersion": queue_tree.API_VERSION, "kind": queue_tree.KIND,
                 "metadata": {"name": "team-%05d" % i, "labels": {"app.kubernetes.io/managed-by": "smshare.kai"}},
                 "spec": {"parentQueue": "root"}} for i in range(0, 2 * n, 4)]
        times = []
        for _round in range(rounds):
            start = time.monotonic()
            plan = queue_tree.plan(items, live=live, prune=True)
            times.append(time.monotonic() - start)
        print("queue_plan  %6d children  %6.2f s median  (%d objects, %d to prune, %d errors)" % (
            n, statistics.median(times), len(plan["objects"]), len(plan["prune"]), len(plan["errors"])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="smshare-lint-bench.") as tmp:
        folder = Path(tmp)
        files, size = write_repository(folder, args.objects)
        mb = size / 1e6
        print("repository: %d objects in %d files, %.1f MB" % (args.objects, files, mb))
        runs = [("ansible -m workload_lint", lambda: through_ansible(folder))]
        if getattr(yaml, "CSafeLoader", None):
            runs.append(("in-process, libyaml", lambda: in_process(folder, yaml.CSafeLoader)))
        else:
            print("(PyYAML has no libyaml here: the module reads with the pure-Python loader)")
        runs.append(("in-process, pure Python", lambda: in_process(folder, yaml.SafeLoader)))
        for name, run in runs:
            times, checked, findings = [], 0, 0
            for _round in range(args.rounds):
                elapsed, checked, findings = run()
                times.append(elapsed)
            median = statistics.median(times)
            print("%-26s %6.2f s median  %8.0f objects/s  %5.1f MB/s  (%d checked, %d findings)" % (
                name, median, checked / median, mb / median, checked, findings))
    queue_plans((2000, 5000, 20000), args.rounds)


if __name__ == "__main__":
    main()

"""The CI command users run on their own manifests: `ansible-playbook
smshare.kai.lint_workloads -e workload_lint_paths=...` from their checkout,
exit status and output as a pipeline sees them (no lab needed)."""
import json
import os
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import yaml

REPO = Path(__file__).resolve().parents[3]

GOOD = {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "half-gpu", "labels": {"kai.scheduler/queue": "team-a"},
                     "annotations": {"gpu-fraction": "0.5"}},
        "spec": {"schedulerName": "kai-scheduler", "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                 "containers": [{"name": "main", "image": "cuda"}]}}
BAD_JOB = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "annotations": {"kai.scheduler/batch-min-member": "8"}},
           "spec": {"parallelism": 4, "template": {
               "metadata": {"labels": {"kai.scheduler/queue": "research"}},
               "spec": {"containers": [{"name": "w", "image": "cuda"}], "restartPolicy": "Never"}}}}


def lint(cwd, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG="", ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    return subprocess.run(["ansible-playbook", "smshare.kai.lint_workloads", *extra],
                          cwd=cwd, env=env, text=True, capture_output=True, check=False)


def test_clean_manifests_pass_and_violations_fail_the_pipeline(tmp_path):
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "pod.yaml").write_text(yaml.safe_dump(GOOD))
    clean = lint(tmp_path, "-e", "workload_lint_paths=k8s/")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 errors, 0 warnings in 1 object checked" in clean.stdout

    (tmp_path / "k8s" / "jobs").mkdir()
    (tmp_path / "k8s" / "jobs" / "train.yml").write_text(yaml.safe_dump(BAD_JOB))
    failed = lint(tmp_path, "-e", "workload_lint_paths=k8s/,k8s/pod.yaml",
                  "-e", '{"workload_lint_queues": [{"name": "research"}, {"name": "team-a", "parent": "research"}]}')
    assert failed.returncode == 2, failed.stdout + failed.stderr
    out = " ".join(failed.stdout.split())
    job = "%s/k8s/jobs/train.yml: Job train: " % tmp_path
    for line in (
            "ERROR: " + job + "metadata.annotations[kai.scheduler/batch-min-member]: asks for 8 pods together but at "
            "most 4 run at once (spec.parallelism is 4)",
            "ERROR: " + job + "spec.template.metadata.labels[kai.scheduler/queue]: names queue 'research', which has "
            "child queues (team-a)",
            "ERROR: " + job + "spec.template.spec.schedulerName: is unset but the pod uses KAI",
            "3 errors, 0 warnings in 3 objects checked: fix the findings listed above."):
        assert line in out, (line, failed.stdout)


def test_a_wrong_path_is_a_failure_not_a_pass(tmp_path):
    proc = lint(tmp_path, "-e", "workload_lint_paths=nowhere/")
    assert proc.returncode == 2
    assert "no such file or directory" in proc.stdout


def test_a_hostile_repository_fails_naming_each_file_and_never_blocks(tmp_path):
    """A FIFO named *.yaml, a binary, a Latin-1 file and one over the size
    limit beside a good manifest: each is an error line, the good one is
    still checked, and the run ends (a FIFO once blocked it forever)."""
    repo = tmp_path / "k8s"
    repo.mkdir()
    os.mkfifo(str(repo / "a-pipe.yaml"))
    (repo / "b-binary.yaml").write_bytes(b"\x00\x01\x02")
    (repo / "c-latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (repo / "d-big.yaml").write_text(yaml.safe_dump(GOOD) + "#" * 4096)
    (repo / "e-pod.yaml").write_text(yaml.safe_dump(GOOD))
    proc = lint(tmp_path, "-e", "workload_lint_paths=k8s/", "-e", "workload_lint_max_file_bytes=2048")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    for line in ("ERROR: %s/a-pipe.yaml: is not a regular file" % repo,
                 "ERROR: %s/b-binary.yaml: is a binary file (a NUL byte at offset 0)" % repo,
                 "ERROR: %s/c-latin1.yaml: is not UTF-8 text (byte 0xe9 at offset 9)" % repo,
                 "ERROR: %s/d-big.yaml: is " % repo,
                 "over the limit of 2048 per file: not checked",
                 "4 errors, 0 warnings in 1 object checked"):
        assert line in out, (line, proc.stdout)


def test_the_sharing_mode_comes_from_the_inventory_or_the_command_line(tmp_path):
    inference = yaml.safe_load(yaml.safe_dump(GOOD))
    inference["metadata"]["labels"]["kai.scheduler/queue"] = "inference"     # a100's leaf queue
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(inference))
    shipped = lint(tmp_path, "-i", str(REPO / "inventories" / "a100"), "-e", "workload_lint_paths=pod.yaml")
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr      # a100: smshare_gpu_sharing_mode NvFractions
    assert "0 errors, 0 warnings in 1 object checked" in shipped.stdout
    off = lint(tmp_path, "-i", str(REPO / "inventories" / "a100"), "-e", "workload_lint_paths=pod.yaml",
               "-e", "workload_lint_sharing_mode=Disabled")
    assert off.returncode == 2, off.stdout + off.stderr
    assert "gpuSharingMode is Disabled" in " ".join(off.stdout.split()) and "[sharing-mode]" in off.stdout


def test_the_list_nesting_limit_is_the_playbooks_to_set(tmp_path):
    nested = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "List", "items": [GOOD]}]}]}
    (tmp_path / "nested.yaml").write_text(yaml.safe_dump(nested))
    default = lint(tmp_path, "-e", "workload_lint_paths=nested.yaml")
    assert default.returncode == 0, default.stdout + default.stderr
    shallow = lint(tmp_path, "-e", "workload_lint_paths=nested.yaml", "-e", "workload_lint_max_list_depth=2")
    assert shallow.returncode == 2 and "nested.yaml" in shallow.stdout, shallow.stdout + shallow.stderr


def test_the_clusters_sharing_mode_replaces_the_inventorys(tmp_path, unreachable_kubeconfig):
    """workload_lint_sharing_mode_from_cluster: the inventory's smshare_gpu_sharing_mode
    (a100: NvFractions) gives way, so the module asks the cluster (here one that does not
    answer: a named failure); an explicit mode beside it is refused as ambiguous."""
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(GOOD))
    common = ["-i", str(REPO / "inventories" / "a100"), "-e", "workload_lint_paths=pod.yaml",
              "-e", "workload_lint_kubeconfig=%s" % unreachable_kubeconfig,
              "-e", "workload_lint_sharing_mode_from_cluster=true"]
    asked = lint(tmp_path, *common)
    assert asked.returncode == 2, asked.stdout + asked.stderr
    assert "cannot reach the API server at https://127.0.0.1:1" in asked.stdout, asked.stdout
    both = lint(tmp_path, *common, "-e", "workload_lint_sharing_mode=NvFractions")
    assert both.returncode == 2 and "give the mode or read it from the cluster, not both" in " ".join(both.stdout.split()), both.stdout + both.stderr


def test_the_reports_a_ci_reads_are_written_even_when_the_run_fails(tmp_path):
    """workload_lint_junit_file and workload_lint_sarif_file: written before the violations
    fail the run (the CI shows them), paths in SARIF relative to where the command runs;
    --check writes neither."""
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "job.yaml").write_text(yaml.safe_dump(BAD_JOB))
    asked = ["-e", "workload_lint_paths=k8s/", "-e", "workload_lint_junit_file=lint.xml",
             "-e", "workload_lint_sarif_file=lint.sarif"]
    checked = lint(tmp_path, "--check", *asked)
    assert checked.returncode == 2 and not (tmp_path / "lint.xml").exists() and not (tmp_path / "lint.sarif").exists()
    failed = lint(tmp_path, *asked)
    assert failed.returncode == 2, failed.stdout + failed.stderr
    suite = ElementTree.parse(str(tmp_path / "lint.xml")).getroot().find("testsuite")
    failing = sorted(c.get("name").split(":")[0] for c in suite.findall("testcase") if c.find("failure") is not None)
    sarif = json.loads((tmp_path / "lint.sarif").read_text())
    results = sarif["runs"][0]["results"]
    assert failing == sorted(set(r["ruleId"] for r in results if r["level"] == "error")) != []
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"k8s/job.yaml"}
    again = lint(tmp_path, *asked)
    assert "changed=0" in again.stdout, again.stdout

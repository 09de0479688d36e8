# Apache-2.0
"""The shipped inventories as a user takes them (README "Running it against a
real cluster"): copied, the registry and kubeconfig set, then every variable
their group_vars define templated on every host, and each cluster play's input
checks run in check mode. No cluster is needed: the checks stop before the API."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SHIPPED = ["a100", "airgap"]
REGISTRY = "registry.lab.internal:5000/team/kai-fork"

# Reads every variable the inventory's group_vars define, as each role would.
TEMPLATE_ALL = """
- name: Template every group_vars variable
  hosts: all
  gather_facts: false
  connection: local
  tasks:
    - name: Read each one
      ansible.builtin.set_fact:
        _templated: "{{ _templated | default({}) | combine({item: lookup('ansible.builtin.vars', item)}) }}"
      loop: "{{ names[group_names | first] | default([]) + names['all'] }}"
"""


def env():
    values = dict(os.environ)
    values.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    values.update(ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY="", ANSIBLE_RETRY_FILES_ENABLED="0")
    return values


def user_copy(tmp_path, name, registry=REGISTRY):
    """What the README tells a user to do: copy, set the registry and the kubeconfig."""
    inventory = tmp_path / name
    shutil.copytree(REPO / "inventories" / name, inventory)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    all_yml = inventory / "group_vars" / "all.yml"
    text = all_yml.read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("smshare_registry:"):
            line = "smshare_registry: %s" % registry
        elif line.startswith("smshare_kubeconfig:"):
            line = "smshare_kubeconfig: %s" % kubeconfig
        lines.append(line)
    all_yml.write_text("\n".join(lines) + "\n")
    return inventory


def playbook(inventory, *args, extra=None):
    argv = ["ansible-playbook", "-i", str(inventory)] + list(args)
    if extra:
        argv += ["-e", json.dumps(extra)]
    return subprocess.run(argv, cwd=str(REPO), env=env(), capture_output=True, text=True, timeout=600, check=False)


def group_var_names(inventory):
    names = {}
    for path in sorted((inventory / "group_vars").glob("*.yml")):
        names[path.stem] = sorted((yaml.safe_load(path.read_text()) or {}).keys())
    return names


@pytest.mark.parametrize("name", SHIPPED)
def test_every_group_var_resolves_on_every_host(tmp_path, name):
    inventory = user_copy(tmp_path, name)
    play = tmp_path / "template_all.yml"
    play.write_text(TEMPLATE_ALL)
    done = playbook(inventory, str(play), extra={"names": group_var_names(inventory)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "failed=0" in done.stdout and "unreachable=0" in done.stdout


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("play", ["kai_scheduler", "gpu_fractioning", "uninstall", "admission_policy"])
def test_each_cluster_play_passes_its_input_checks(tmp_path, name, play):
    inventory = user_copy(tmp_path, name)
    done = playbook(inventory, "playbooks/%s.yml" % play, "--check", "--tags", "%s_validate" % play)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "is undefined" not in done.stdout


@pytest.mark.parametrize("name", SHIPPED)
def test_the_placeholder_registry_is_refused_naming_the_knob(tmp_path, name):
    inventory = user_copy(tmp_path, name, registry="registry.example.com/team/kai-fork")
    done = playbook(inventory, "playbooks/kai_scheduler.yml", "--check", "--tags", "kai_scheduler_validate")
    assert done.returncode != 0
    assert "smshare_registry" in done.stdout and "Nothing was changed" in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("play", ["kai_scheduler", "gpu_fractioning"])
@pytest.mark.parametrize("registry", ["registry.lab.internal:99999/team/kai-fork", "registry.lab.internal:x/team"])
def test_a_registry_port_out_of_range_is_refused_before_the_cluster(tmp_path, play, registry):
    inventory = user_copy(tmp_path, "a100", registry=registry)
    done = playbook(inventory, "playbooks/%s.yml" % play, "--check", "--tags", "%s_validate" % play)
    assert done.returncode != 0 and "%s_registry is '%s'" % (play, registry) in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("play", ["kai_scheduler", "gpu_fractioning"])
def test_a_registry_with_credentials_is_refused_without_showing_them(tmp_path, play):
    inventory = user_copy(tmp_path, "a100", registry="alice:s3cret@registry.lab.internal:5000/team")
    done = playbook(inventory, "playbooks/%s.yml" % play, "--check", "-vvv", "--tags", "%s_validate" % play)
    assert done.returncode != 0 and "<redacted>@registry.lab.internal:5000/team" in done.stdout, done.stdout[-3000:]
    assert "s3cret" not in done.stdout + done.stderr


def test_a_bad_queue_tree_is_named_when_the_cluster_cannot_be_read(tmp_path):
    """The a100 copy's kubeconfig points at no cluster: a cycle and a limit
    below its quota are named beside the connection error."""
    inventory = user_copy(tmp_path, "a100")
    queues = [{"name": "research", "parent": "ml-team"}, {"name": "ml-team", "parent": "research"},
              {"name": "cv-team", "parent": "platform", "resources": {"gpu": {"quota": 4, "limit": 2}}}]
    done = playbook(inventory, "playbooks/queues.yml", extra={"smshare_queues": queues})
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and "Could not read the cluster's Queue objects" in out, done.stdout[-3000:]
    assert "The queue tree also has 2 problem(s) of its own" in out and "cycle" in out, done.stdout[-3000:]
    # cv-team's parent may be in the cluster, which was not read: not a problem yet.
    assert "Nothing was changed" in out and "neither declared nor in the cluster" not in out


@pytest.mark.parametrize("image", ["alice:s3cret@mirror.lab.internal/nvidia/cuda:13.3.1",
                                   "https://alice:s3cret@mirror.lab.internal/nvidia/cuda:13.3.1",
                                   "nvidia/cuda:13.3.1 --privileged", "mirror.lab.internal/NVIDIA/cuda:13.3.1"])
def test_a_smoke_test_image_that_is_not_a_plain_reference_is_refused_unechoed(tmp_path, image):
    inventory = user_copy(tmp_path, "a100")
    done = playbook(inventory, "playbooks/smoke_test.yml", "-vvv", extra={"smoke_test_image": image})
    assert done.returncode != 0 and "smoke_test_image=" in done.stdout and "Nothing was changed" in done.stdout, \
        done.stdout[-3000:]
    assert "s3cret" not in done.stdout + done.stderr


def report_dirs(tmp_path):
    """Bad report folders: relative, escaping with '..', a file."""
    (tmp_path / "a-file").write_text("")
    return {"relative": ("reports/audit", "must be an absolute path"),
            "dotdot": (str(tmp_path / ".." / "x"), "must be an absolute path"),
            "file": (str(tmp_path / "a-file"), "not a folder")}


@pytest.mark.parametrize("case", ["relative", "dotdot", "file"])
@pytest.mark.parametrize("play, variable", [("audit", "smshare_audit_report_dir"),
                                            ("smoke_test", "smoke_test_report_dir")])
def test_a_bad_report_folder_is_refused_before_any_cluster_contact(tmp_path, case, play, variable):
    value, words = report_dirs(tmp_path)[case]
    inventory = user_copy(tmp_path, "a100")
    done = playbook(inventory, "playbooks/%s.yml" % play, extra={variable: value})
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and "%s=" % variable in out and words in out, done.stdout[-3000:]
    # Refused before any GPU node was asked anything (the a100 inventory's nodes do not exist here).
    assert "UNREACHABLE" not in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("exists", [False, True])
def test_a_good_report_folder_passes_the_audits_check(tmp_path, exists):
    folder = tmp_path / "audit"
    if exists:
        folder.mkdir()
    inventory = user_copy(tmp_path, "a100")
    done = playbook(inventory, "playbooks/audit.yml", "--limit", "localhost", "--tags", "audit_check_report_dir",
                    extra={"smshare_audit_report_dir": str(folder)})
    assert done.returncode == 0 and "failed=0" in done.stdout, done.stdout[-3000:]
    assert "TASK [Check it is a folder this user can write, or can be created] ***" in done.stdout


@pytest.mark.parametrize("name", SHIPPED)
def test_site_parses_and_lists_every_play(tmp_path, name):
    inventory = user_copy(tmp_path, name)
    done = playbook(inventory, "site.yml", "--list-tasks")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for role in ("preflight", "kai_scheduler", "gpu_fractioning", "smoke_test"):
        assert "%s :" % role in done.stdout, role


def test_the_airgap_inventory_sets_every_knob_the_a100_one_does():
    """An air-gapped site changes where things come from, never which knobs reach
    the roles (the airgap copy once left the GPU Operator at its defaults). The
    collection wires the knobs (playbooks/vars/wiring.yml): the inventories hold
    all.yml and their hosts alone."""
    def knobs(name):
        folder = REPO / "inventories" / name / "group_vars"
        assert sorted(p.name for p in folder.iterdir()) == ["all.yml"], name
        return yaml.safe_load((folder / "all.yml").read_text()) or {}
    assert sorted(set(knobs("a100")) - set(knobs("airgap"))) == []


@pytest.mark.parametrize("extra, words", [
    pytest.param({"kai_pilot_chart_ref": "oci://ghcr.io:99999/kai-scheduler/kai-scheduler/kai-scheduler"},
                 "must be an oci:// chart reference", id="chart_ref-port-out-of-range"),
    pytest.param({"kai_pilot_chart_ref": "oci://ghcr.io/Kai-Scheduler/kai-scheduler"},
                 "must be an oci:// chart reference", id="chart_ref-upper-case-path"),
    pytest.param({"kai_pilot_chart_ref": "oci://alice:s3cret@ghcr.io/kai-scheduler/kai-scheduler"},
                 "oci://<redacted>@ghcr.io", id="chart_ref-credentials-redacted"),
    pytest.param({"kai_pilot_queue_gpu_quota": "inf", "kai_pilot_queue_gpu_limit": "inf"},
                 "kai_pilot_queue_gpu_quota=inf", id="quota-infinite"),
    pytest.param({"kai_pilot_queue_gpu_quota": "nan"}, "kai_pilot_queue_gpu_quota=nan", id="quota-nan"),
])
def test_the_pilot_refuses_bad_input_before_the_cluster(tmp_path, extra, words):
    inventory = user_copy(tmp_path, "a100")
    done = playbook(inventory, "playbooks/pilot.yml", "-vvv", extra=extra)
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and words in out and "Nothing was changed" in out, done.stdout[-3000:]
    assert "s3cret" not in done.stdout + done.stderr


# The role's argument spec refuses what its choices exclude, its input checks the rest: both before
# the cluster is read.
@pytest.mark.parametrize("extra, words", [
    pytest.param({"smshare_admission_policy_action": "deny"},
                 "value of admission_policy_action must be one of: Warn, Deny, got: deny", id="action-lowercase"),
    pytest.param({"admission_policy_failure_policy": "Retry"},
                 "value of admission_policy_failure_policy must be one of: Fail, Ignore, got: Retry", id="failure-policy"),
    pytest.param({"admission_policy_state": "gone"},
                 "value of admission_policy_state must be one of: present, absent, got: gone", id="state"),
    pytest.param({"admission_policy_name": "Workload_Rules"},
                 "admission_policy_name is 'Workload_Rules'", id="name"),
    pytest.param({"smshare_admission_policy_namespace_selector": {}},
                 "admission_policy_namespace_selector is", id="selector-every-namespace"),
])
def test_the_admission_policy_refuses_bad_input_before_the_cluster(tmp_path, extra, words):
    inventory = user_copy(tmp_path, "a100")
    done = playbook(inventory, "playbooks/admission_policy.yml", "--check", extra=extra)
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and words in out, done.stdout[-3000:]
    assert "Refuse a cluster that does not serve" not in out, "refused before the cluster is read"


@pytest.mark.parametrize("name", SHIPPED)
def test_a_sites_files_in_its_inventory_folder_are_not_read_as_inventory(tmp_path, name):
    """inventories/airgap keeps the cuda-keyring .deb in files/ and both write the image
    manifest beside hosts.yml: with ansible.cfg's ignore_patterns they add no host, no
    group and no warning (an ar archive parsed as INI, a manifest's keys as groups)."""
    inventory = user_copy(tmp_path, name)
    before = subprocess.run(["ansible-inventory", "-i", str(inventory), "--list"], cwd=str(REPO), env=env(),
                            capture_output=True, text=True, check=True)
    (inventory / "files").mkdir(exist_ok=True)
    (inventory / "files" / "cuda-keyring_1.1-1_all.deb").write_bytes(b"!<arch>\ndebian-binary   \n2.0\n")
    (inventory / "fork_images_manifest.json").write_text(
        json.dumps({"kai-scheduler": {"images": ["registry.lab.internal:5000/a:1"]}, "built": "2026-12-06"}))
    after = subprocess.run(["ansible-inventory", "-i", str(inventory), "--list"], cwd=str(REPO), env=env(),
                           capture_output=True, text=True, check=True)
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert "WARNING" not in after.stderr, after.stderr

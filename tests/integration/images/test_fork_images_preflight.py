# Apache-2.0
"""Every input rule of fork_images, table-driven: each row sets one bad value
on top of a valid configuration, runs the role's preflight (the first thing
main.yml does) and expects a refusal naming the variable, the rule, an example
and "Nothing was changed", with credentials never shown. All rows run in one
ansible-playbook (block/rescue per row); test_fork_images_role.py proves on
the real entry point that such a refusal leaves the build host untouched.
"""
import json
import subprocess
import sys

import pytest

from conftest import REPO, base_env

SECRET = "S3cret-9d1f"
VALID = {
    "fork_images_registry": "registry.example.com/team/kai-fork",
    "fork_images_registry_username": "robot-kai",
    "fork_images_registry_password": SECRET,
    "fork_images_registry_ca_file": "/etc/ssl/certs/registry-ca.crt",
    "fork_images_tag": "smshare-44d1d0a-af0544e",
    "fork_images_build_environment": {"GOPROXY": "https://proxy.golang.org", "HTTPS_PROXY": "http://proxy:3128"},
}
KAI_URL = "https://github.com/kai-scheduler/KAI-Scheduler.git"

# (variable set, bad value, words the message must hold[, other variables the row sets])
CASES = [
    # control characters and line breaks, wherever they would reach a file, an argv or stdin
    ("fork_images_kai_scheduler_commit", "44d1d0a966465c69b1fd0d24b40b9a1ebb73699e\n", ["full 40-character"]),
    ("fork_images_gpu_fractioning_commit", "af0544e4dbd1d8e03ca14fc1e06d6265fabed99\x00", ["full 40-character"]),
    ("fork_images_kai_scheduler_pr_ref", "pull/2368/head\n", ["must be a git ref"]),
    ("fork_images_kai_scheduler_repo_url", KAI_URL + "\n", ["must be a URL git clones from"]),
    ("fork_images_registry", "registry.example.com/team\n", ["host[:port]/path"]),
    ("fork_images_tag", "t1\n", ["must be an image tag"]),
    ("fork_images_kai_scheduler_platforms", ["linux/amd64\n"], ["os/arch[/variant]"]),
    ("fork_images_gpu_fractioning_images", ["operator\n"], ["at least one image name"]),
    ("fork_images_registry_username", "robot\nkai", ["must be a user name"]),
    ("fork_images_registry_password", SECRET + "\n", ["(not shown)", "without control characters"]),
    ("fork_images_build_environment", {"GOPROXY": "a\nb"}, ["values not shown", "without control characters"]),
    ("fork_images_multiarch_builder", "kai\tmultiarch", ["buildx builder name"]),
    ("fork_images_binfmt_image", "tonistiigi/binfmt\n", ["image reference"]),
    ("fork_images_workdir", "/var/tmp/kai\n", ["absolute, normalised path"]),
    # a leading '-' where a positional argument goes
    ("fork_images_kai_scheduler_pr_ref", "--upload-pack=touch /tmp/pwned", ["not starting with '-'"]),
    ("fork_images_gpu_fractioning_repo_url", "--config=x", ["must be a URL git clones from"]),
    ("fork_images_registry_username", "-p", ["not starting with '-'"]),
    ("fork_images_binfmt_image", "--privileged", ["image reference"]),
    ("fork_images_multiarch_builder", "-kai", ["buildx builder name"]),
    ("fork_images_tag", "-t1", ["must be an image tag"]),
    ("fork_images_registry", "-x.example.com/a", ["host[:port]/path"]),
    # paths: empty, relative, '..', the root
    ("fork_images_workdir", "", ["absolute, normalised path"]),
    ("fork_images_workdir", "kai-forks", ["absolute, normalised path"]),
    ("fork_images_workdir", "/var/tmp/../../etc", ["absolute, normalised path"]),
    ("fork_images_workdir", "/", ["other than /"]),
    ("fork_images_log_dir", "logs", ["fork_images_log_dir"]),
    ("fork_images_manifest_path", "manifest.json", ["fork_images_manifest_path"]),
    ("fork_images_registry_ca_file", "ca.crt", ["absolute, normalised path", "system CAs"]),
    ("fork_images_registry_ca_file", "/etc/ssl/../ssl//ca.crt", ["absolute, normalised path"]),
    # numbers out of range
    ("fork_images_build_timeout", 0, ["whole seconds above 0"]),
    ("fork_images_build_timeout", -60, ["whole seconds above 0"]),
    ("fork_images_build_timeout", "3h", ["whole seconds above 0"]),
    ("fork_images_build_poll_interval", 0, ["whole seconds above 0"]),
    ("fork_images_build_poll_interval", 20000, ["the poll interval at most the timeout"]),
    ("fork_images_build_report_interval", 0, ["whole seconds above 0"]),
    # empty lists where one item is needed
    ("fork_images_kai_scheduler_platforms", [], ["at least one os/arch[/variant] platform"]),
    ("fork_images_gpu_fractioning_images", [], ["at least one image name"]),
    ("fork_images_kai_scheduler_services", [], ["at least one image name"]),
    # values that break the tools' own formats
    ("fork_images_kai_scheduler_platforms", ["linux/amd64,linux/arm64"], ["os/arch[/variant]"]),
    ("fork_images_kai_scheduler_platforms", ["linux/amd64", "linux/amd64"], ["each once"]),
    ("fork_images_gpu_fractioning_platforms", "linux/amd64", ["at least one os/arch[/variant] platform"]),
    ("fork_images_kai_scheduler_services", ["Scheduler"], ["lowercase letters"]),
    ("fork_images_kai_scheduler_services", ["kai/scheduler"], ["lowercase letters"]),
    ("fork_images_build_environment", {"GO-PROXY": "x"}, ["variable names"]),
    ("fork_images_build_environment", {"BUILDX_BUILDER": "x"}, ["BUILDX_BUILDER is the role's to set"]),
    ("fork_images_build_environment", "GOPROXY=x", ["not a mapping"]),
    ("fork_images_tag", "t" * 129, ["at most 128"]),
    # credentials where users put them: in URLs and references
    ("fork_images_registry", f"robot:{SECRET}@registry.example.com/team",
     ["must not carry credentials", "<redacted>@registry.example.com/team"]),
    ("fork_images_kai_scheduler_repo_url", f"https://robot:{SECRET}@github.com/k/K.git",
     ["https://<redacted>@github.com/k/K.git", "credential helper"]),
    ("fork_images_kai_scheduler_repo_url", f"https://{SECRET}@github.com/k/K.git", ["<redacted>"]),
    ("fork_images_gpu_fractioning_repo_url", f"ssh://git:{SECRET}@github.com/k/g.git", ["<redacted>"]),
    ("fork_images_gpu_fractioning_repo_url", f"git:{SECRET}@github.com:k/g.git", ["<redacted>@github.com:k/g.git"]),
    ("fork_images_binfmt_image", f"robot:{SECRET}@docker.io/tonistiigi/binfmt",
     ["without credentials", "<redacted>@docker.io"]),
    # wrong kinds of URL and reference
    ("fork_images_registry", "https://registry.example.com/team", ["without scheme"]),
    ("fork_images_registry", "team/kai-fork", ["Docker Hub path"]),
    ("fork_images_registry", "registry.example.com/Team", ["lowercase path"]),
    ("fork_images_registry", "registry.example.com/team/", ["trailing slash"]),
    ("fork_images_registry", "registry.example.com/team:t1", ["host[:port]/path"]),
    ("fork_images_kai_scheduler_repo_url", "ftp://example.com/k.git", ["must be a URL git clones from"]),
    ("fork_images_kai_scheduler_repo_url", "relative/path", ["must be a URL git clones from"]),
    ("fork_images_kai_scheduler_pr_ref", "pull/../../head", ["no '..'"]),
    ("fork_images_kai_scheduler_commit", "main", ["full 40-character"]),
    ("fork_images_kai_scheduler_commit", "44D1D0A966465C69B1FD0D24B40B9A1EBB73699E", ["lowercase hex"]),
    # credentials: never empty; the pair is checked on the real play (unset cannot be set here)
    ("fork_images_registry_password", "", ["non-empty password", "leave both unset rather than empty"]),
    ("fork_images_registry_username", "", ["must be a user name"]),
    # one platform per fork without pushing: KAI's default (the host's platform) is one, so it
    # takes two asked platforms (a multi-platform image cannot be loaded into the daemon)
    ("fork_images_kai_scheduler_platforms", ["linux/amd64", "linux/arm64"],
     ["exactly one with fork_images_push=false", "cannot be loaded into the local Docker daemon",
      "fork_images_push=true"], {"fork_images_push": False}),
    ("fork_images_gpu_fractioning_platforms", ["linux/amd64", "linux/arm64"],
     ["exactly one with fork_images_push=false"], {"fork_images_push": False}),
]

PLAY_HEAD = """
- name: Every preflight rule, one bad value at a time
  hosts: localhost
  gather_facts: false
  vars_files: [{valid}]
  tasks:
"""
ROW = """
    - name: Row {n}
      block:
        - name: Run the preflight with row {n}
          ansible.builtin.include_role:
            name: smshare.kai.fork_images
            tasks_from: validate.yml
          vars: {row}
        - name: Record that row {n} passed
          ansible.builtin.set_fact:
            outcome: "{{{{ outcome | default({{}}) | combine({{'{n}': 'PASSED'}}) }}}}"
      rescue:
        - name: Record the refusal of row {n}
          ansible.builtin.set_fact:
            outcome: "{{{{ outcome | default({{}}) | combine({{'{n}': msg}}) }}}}"
          vars:
            # a looped check fails with "One or more items failed"; the user reads each item's message
            msg: >-
              {{{{ (ansible_failed_result.results | selectattr('failed', 'defined') | selectattr('failed')
                   | map(attribute='msg') | first) if 'results' in ansible_failed_result
                   else ansible_failed_result.msg }}}}
"""
PLAY_TAIL = """
    - name: Save every outcome
      ansible.builtin.copy:
        content: "{{ outcome | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("preflight")
    valid = root / "valid.json"
    valid.write_text(json.dumps(VALID))
    rows = [dict(case[3] if len(case) > 3 else {}, **{case[0]: case[1]}) for case in CASES]
    rows += [{}, {"fork_images_push": False}]      # the last rows: all valid, and not pushing (the host's platform)
    play = root / "play.yml"
    play.write_text(PLAY_HEAD.format(valid=valid) + "".join(ROW.format(n=n, row=json.dumps(row))
                                                            for n, row in enumerate(rows)) + PLAY_TAIL)
    extra = root / "extra.json"
    extra.write_text(json.dumps({"out": str(root / "out.json"),
                                 "ansible_python_interpreter": sys.executable}))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play), "-e", f"@{extra}"],
                          env=base_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert SECRET not in proc.stdout
    return json.loads((root / "out.json").read_text())


def test_a_valid_configuration_passes(outcomes):
    assert outcomes[str(len(CASES))] == "PASSED"


def test_not_pushing_passes_with_the_default_platforms(outcomes):
    """KAI-Scheduler's default is the build host's one platform: loadable into the daemon."""
    assert outcomes[str(len(CASES) + 1)] == "PASSED"


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=["%s=%r%s" % (c[0], c[1], " +%s" % c[3] if len(c) > 3 else "")[:90] for c in CASES])
def test_each_bad_value_is_refused_clearly(outcomes, index):
    name, _value, words = CASES[index][:3]
    msg = " ".join(outcomes[str(index)].split())
    assert msg != "PASSED", "%s was accepted" % name
    assert name in msg, msg
    for word in words:
        assert word in msg, (word, msg)
    assert "Nothing was changed" in msg
    assert "example" in msg.lower()
    assert SECRET not in msg

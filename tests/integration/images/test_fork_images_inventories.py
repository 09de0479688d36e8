# Apache-2.0
"""What fork_images receives from each inventory: the values after templating,
not the wiring text (a wiring to an undefined knob reads the same as a good one).
The role's own preflight runs on them, so an inventory that passes here passes
on a real build host."""
import json
import platform
import subprocess
import sys

import pytest

from conftest import REPO, base_env

# KAI-Scheduler's default: the build host's platform, as its Makefile derives it.
HOST = "linux/" + {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())

PLAY = """
- name: Read what fork_images receives
  hosts: build_hosts
  gather_facts: false
  # The collection's wiring of the knobs, as playbooks/images.yml loads it.
  vars_files: ["{{ wiring }}"]
  tasks:
    - name: Run the role's checks and expose its derived values
      ansible.builtin.include_role:
        name: smshare.kai.fork_images
        tasks_from: validate.yml
        public: true
    - name: Save them
      ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: >-
          {{ {'registry': fork_images_registry, 'tag': _fork_images_tag,
              'login': _fork_images_login, 'ca_file': _fork_images_ca_file if _fork_images_ca_file != omit else none,
              'password_given': (fork_images_registry_password | default(omit)) != omit,
              'manifest_path': fork_images_manifest_path, 'workdir': fork_images_workdir,
              'login_tool': fork_images_registry_login_tool,
              'build_environment': fork_images_build_environment.keys() | list,
              'fork': _fork_images_forks} | to_json }}
      delegate_to: localhost
"""


def received(tmp_path, inventories, env=None):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "out.json"
    # The preflight reads the build host's architecture (KAI-Scheduler's default platform): this
    # machine stands for the inventory's build host.
    argv = ["ansible-playbook", str(play), "-e", f"out={out}", "-e", f"wiring={REPO / 'playbooks' / 'vars' / 'wiring.yml'}",
            "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", "ansible_connection=local"]
    for inventory in inventories:
        argv += ["-i", str(inventory)]
    proc = subprocess.run(argv, env=env or base_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    data = json.loads(out.read_text())
    data["fork"] = {f["id"]: f for f in data["fork"]}
    return data


def test_a100_gives_the_guides_pins_and_leaves_optional_values_unset(tmp_path):
    got = received(tmp_path, [REPO / "inventories" / "a100"])
    assert got["registry"] == "registry.example.com/team/kai-fork"
    assert got["tag"] == "smshare-44d1d0a-af0544e"                  # the guide's, computed from the two SHAs
    kai, frac = got["fork"]["kai_scheduler"], got["fork"]["gpu_fractioning"]
    assert (kai["repo_url"], kai["pr_ref"], kai["commit"]) == (
        "https://github.com/kai-scheduler/KAI-Scheduler.git", "pull/2368/head",
        "44d1d0a966465c69b1fd0d24b40b9a1ebb73699e")
    assert (frac["repo_url"], frac["pr_ref"], frac["commit"]) == (
        "https://github.com/kai-scheduler/gpu-fractioning.git", "pull/147/head",
        "af0544e4dbd1d8e03ca14fc1e06d6265fabed99b")
    assert kai["platforms"] == [HOST] and frac["platforms"] == ["linux/amd64"]
    assert "DOCKER_BUILD_PLATFORM" not in " ".join(kai["make_args"])          # the guide's command
    # credentials, CA and tag are commented out in all.yml: unset, not ""
    assert got["login"] is False and got["password_given"] is False and got["ca_file"] is None
    assert got["manifest_path"] == str(REPO / "inventories" / "a100" / "fork_images_manifest.json")


def test_a100_credentials_when_set_reach_the_role(tmp_path):
    extra = tmp_path / "creds.yml"
    extra.write_text("smshare_registry_username: robot-kai\nsmshare_registry_password: pw-1\n"
                     "smshare_registry_ca_file: /etc/ssl/certs/registry-ca.crt\nsmshare_image_tag: t-2\n")
    play_inventory = tmp_path / "inv"
    play_inventory.mkdir()
    (play_inventory / "group_vars").mkdir()
    (play_inventory / "group_vars" / "all.yml").write_text(extra.read_text())
    (play_inventory / "hosts.yml").write_text("all: {}\n")
    got = received(tmp_path, [REPO / "inventories" / "a100", play_inventory])
    assert got["login"] is True and got["password_given"] is True
    assert got["ca_file"] == "/etc/ssl/certs/registry-ca.crt" and got["tag"] == "t-2"


@pytest.mark.lab
def test_lab_gives_its_registry_forks_and_build_environment(tmp_path, lab):
    got = received(tmp_path, lab.inventory, env=dict(base_env(), **lab.env))
    forks = json.loads((lab.state_dir / "forks" / "forks.json").read_text())
    assert got["registry"] == lab.registry.address + "/kai-fork"
    assert got["login"] is True and got["password_given"] is True and got["ca_file"] == lab.registry.ca
    assert got["fork"]["kai_scheduler"]["repo_url"] == forks["kai_scheduler"]["url"]
    assert got["fork"]["kai_scheduler"]["commit"] == forks["kai_scheduler"]["commit"]
    assert got["fork"]["kai_scheduler"]["platforms"] == [HOST]                # the role's default
    assert got["login_tool"] == "buildah" and "REGISTRY_AUTH_FILE" in got["build_environment"]
    assert got["workdir"] == str(lab.state_dir / "kai-forks")

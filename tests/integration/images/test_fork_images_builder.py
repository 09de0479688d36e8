# Apache-2.0
"""The role's build-machinery checks (tasks/builder.yml) on recorded `docker
buildx ls` / `docker buildx inspect` output, through a docker test double
(recorded/docker). The lab has no Docker engine, so this is where these checks
are proven; the lab inventory turns them off by an explicit variable.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, base_env

RECORDED = Path(__file__).resolve().parent / "recorded"
PLAY = """
- name: Run the fork_images builder checks alone
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Set the tag validate.yml would compute
      ansible.builtin.set_fact:
        _fork_images_tag: smshare-44d1d0a-af0544e
    - name: Check the build machinery
      ansible.builtin.include_role:
        name: smshare.kai.fork_images
        tasks_from: builder.yml
"""


def run(tmp_path, ls=None, inspect=None, qemu_works=True, check=False, **role_vars):
    state = tmp_path / "docker-state"
    state.mkdir()
    if ls:
        shutil.copy(RECORDED / ls, state / "ls.txt")
    if inspect:
        shutil.copy(RECORDED / inspect, state / "inspect-kai-multiarch.txt")
    if qemu_works:
        (state / "qemu-works").touch()
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = dict(base_env(), FAKE_DOCKER_STATE=str(state), PATH=f"{RECORDED}:{base_env()['PATH']}")
    argv = ["ansible-playbook", "-i", "localhost,", "-c", "local", str(play),
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(role_vars)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, check=False)
    calls = (state / "calls.log").read_text().splitlines() if (state / "calls.log").exists() else []
    return proc, calls


ONE = {"fork_images_platforms": ["linux/amd64"]}
TWO = {"fork_images_platforms": ["linux/amd64", "linux/arm64"]}
LOCAL = {"fork_images_registry": "127.0.0.1:5443/kai-fork"}
REMOTE = {"fork_images_registry": "registry.example.com/team/kai-fork"}


def test_docker_driver_builder_may_push_to_localhost(tmp_path):
    proc, calls = run(tmp_path, ls="buildx-ls-default-docker.txt", **ONE, **LOCAL)
    assert proc.returncode == 0, proc.stdout
    assert calls == ["buildx ls"]


@pytest.mark.parametrize("ls, name", [("buildx-ls-container-current.txt", "builder-x"),
                                      ("buildx-ls-old-container-current.txt", "mybuilder")])
def test_docker_container_builder_is_refused_for_localhost(tmp_path, ls, name):
    proc, _calls = run(tmp_path, ls=ls, **ONE, **LOCAL)
    assert proc.returncode != 0
    assert f"current buildx builder {name}, whose driver docker-container" in proc.stdout
    assert "cannot push to 127.0.0.1:5443 on localhost" in proc.stdout


def test_docker_container_builder_may_push_to_a_network_registry(tmp_path):
    proc, _calls = run(tmp_path, ls="buildx-ls-old-container-current.txt", **ONE, **REMOTE)
    assert proc.returncode == 0, proc.stdout


def test_no_docker_engine_fails_with_a_clear_message(tmp_path):
    proc, _calls = run(tmp_path, ls=None, **ONE, **REMOTE)
    assert proc.returncode != 0
    assert "Cannot connect to the Docker daemon" in proc.stdout
    assert "set fork_images_check_builder: false" in proc.stdout


def test_multi_platform_creates_a_dedicated_builder_and_installs_qemu(tmp_path):
    proc, calls = run(tmp_path, ls="buildx-ls-default-docker.txt", **TWO, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert calls == [
        "buildx ls",
        "buildx inspect kai-multiarch",
        "buildx create --name kai-multiarch --driver docker-container",
        "buildx inspect --bootstrap kai-multiarch",
        "run --privileged --rm tonistiigi/binfmt --install arm64",
        "buildx inspect --bootstrap kai-multiarch",
    ]
    assert not any(c.startswith("buildx use") for c in calls)  # the default builder stays current


def test_multi_platform_with_a_ready_builder_changes_nothing(tmp_path):
    proc, calls = run(tmp_path, ls="buildx-ls-default-docker.txt",
                      inspect="buildx-inspect-multiarch-with-qemu.txt", **TWO, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert "changed=0" in proc.stdout
    assert calls == ["buildx ls", "buildx inspect kai-multiarch", "buildx inspect --bootstrap kai-multiarch"]


def test_multi_platform_check_mode_creates_nothing(tmp_path):
    proc, calls = run(tmp_path, ls="buildx-ls-default-docker.txt", check=True, **TWO, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert calls == ["buildx ls", "buildx inspect kai-multiarch"]


def test_multi_platform_to_localhost_is_refused(tmp_path):
    proc, calls = run(tmp_path, ls="buildx-ls-default-docker.txt", **TWO, **LOCAL)
    assert proc.returncode != 0
    assert "cannot reach 127.0.0.1:5443 on" in proc.stdout
    assert not any("create" in c for c in calls)


def test_existing_builder_with_another_driver_is_refused(tmp_path):
    proc, calls = run(tmp_path, ls="buildx-ls-default-docker.txt",
                      inspect="buildx-inspect-multiarch-docker-driver.txt", **TWO, **REMOTE)
    assert proc.returncode != 0
    assert "exists with another driver (docker)" in proc.stdout
    assert not any("create" in c or "run" in c for c in calls)


def test_emulation_that_does_not_take_fails_naming_the_platform(tmp_path):
    proc, _calls = run(tmp_path, ls="buildx-ls-default-docker.txt", qemu_works=False, **TWO, **REMOTE)
    assert proc.returncode != 0
    assert "cannot build linux/arm64" in " ".join(proc.stdout.split())

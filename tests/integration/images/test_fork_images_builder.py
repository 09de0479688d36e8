# Apache-2.0
"""The role's build machinery (tasks/builder.yml) against the lab's stand-in
docker CLI (lab/standin/docker: the real `docker buildx ls`/`inspect` formats,
builders and QEMU kept in a state file). builder.yml runs alone, as
`--tags fork_images_builder` would: every derived value is a plain variable, so the
entry point needs nothing set beforehand. No registry is contacted.
"""
import json
import platform
import subprocess
import sys

import pytest

from conftest import REPO, STANDIN_DOCKER, base_env

PLAY = """
- name: Run the fork_images build machinery alone
  hosts: buildhost
  gather_facts: false
  tasks:
    - name: Prepare the builders
      ansible.builtin.include_role:
        name: smshare.kai.fork_images
        tasks_from: {tasks_from}
"""
LOCAL = {"fork_images_registry": "127.0.0.1:5443/kai-fork"}
REMOTE = {"fork_images_registry": "registry.example.com/team/kai-fork"}
TWO = ["linux/amd64", "linux/arm64"]
BOOTED_DEFAULT = {"name": "default", "driver": "docker", "status": "running"}
# The build host's platform as KAI's Makefile derives it (uname -m, x86_64 -> amd64, aarch64 -> arm64).
HOST = "linux/" + {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
CONTAINER_CURRENT = {"current": "builder-x",
                     "builders": [{"name": "builder-x", "driver": "docker-container", "status": "running"},
                                  BOOTED_DEFAULT]}


def run(tmp_path, state=None, check=False, tasks_from="builder.yml", **role_vars):
    docker = tmp_path / "docker"
    docker.mkdir(exist_ok=True)
    if state is not None:
        (docker / "state.json").write_text(json.dumps(state))
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(tasks_from=tasks_from))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    buildhost:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {sys.executable}\n")
    env = dict(base_env(), STANDIN_DOCKER_STATE=str(docker), PATH=f"{STANDIN_DOCKER}:{base_env()['PATH']}")
    argv = ["ansible-playbook", "-i", str(inventory), str(play), "-e", json.dumps(role_vars)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
                          check=False)
    calls = (docker / "calls.log").read_text().splitlines() if (docker / "calls.log").exists() else []
    (docker / "calls.log").unlink(missing_ok=True)
    return proc, calls


def text(proc):
    return " ".join(proc.stdout.split())


def changed(proc):
    return int(text(proc).split("changed=")[1].split()[0])


def test_kai_by_default_builds_the_host_platform_on_the_current_docker_builder(tmp_path):
    """The guide's make build: the host's platform, which the docker driver
    builds natively, so nothing is installed, started or created."""
    proc, calls = run(tmp_path, **LOCAL)          # defaults: KAI for the host's platform, the current builder
    assert proc.returncode == 0, proc.stdout
    assert calls == ["buildx ls", "buildx inspect"]
    assert changed(proc) == 0


def test_kai_on_two_platforms_on_a_current_container_builder_gets_qemu_once(tmp_path):
    proc, calls = run(tmp_path, state=CONTAINER_CURRENT, fork_images_kai_scheduler_platforms=TWO, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert calls == ["buildx ls", "buildx inspect", "run --privileged --rm tonistiigi/binfmt --install arm64",
                     "buildx ls", "buildx inspect"]
    assert not any(c.startswith(("buildx use", "buildx create")) for c in calls)
    again, calls = run(tmp_path, fork_images_kai_scheduler_platforms=TWO, **REMOTE)
    assert again.returncode == 0 and changed(again) == 0, again.stdout
    assert calls == ["buildx ls", "buildx inspect"]


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
@pytest.mark.parametrize("state, name", [
    (None, "default"),
    ({"current": "desktop", "builders": [{"name": "desktop", "driver": "docker", "status": "running"},
                                         BOOTED_DEFAULT]}, "desktop"),
])
def test_kai_on_two_platforms_is_refused_on_a_docker_driver_builder(tmp_path, state, name, check):
    proc, calls = run(tmp_path, state=state, check=check, fork_images_kai_scheduler_platforms=TWO, **REMOTE)
    assert proc.returncode != 0
    out = text(proc)
    assert 'fork_images_kai_scheduler_platforms=["linux/amd64", "linux/arm64"]' in out
    assert f"current buildx builder {name}, whose driver docker cannot build several platforms" in out
    assert "docker buildx create --name kai-builder --driver docker-container --use" in out
    assert f"leave fork_images_kai_scheduler_platforms unset: {HOST}" in out
    assert "Nothing was changed" in out
    assert calls == ["buildx ls", "buildx inspect"]                  # nothing installed, created or started


def test_kai_on_two_platforms_on_a_docker_builder_with_a_local_registry_says_both(tmp_path):
    proc, _calls = run(tmp_path, fork_images_kai_scheduler_platforms=TWO, **LOCAL)
    assert proc.returncode != 0
    out = text(proc)
    assert "whose driver docker cannot build several platforms" in out
    assert "a builder container cannot reach 127.0.0.1:5443 on localhost" in out


def test_check_mode_installs_and_starts_nothing(tmp_path):
    proc, calls = run(tmp_path, check=True, fork_images_gpu_fractioning_platforms=TWO, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert calls == ["buildx ls", "buildx inspect", "buildx inspect -- kai-multiarch"]


@pytest.mark.parametrize("state, name", [
    ({"current": "builder-x", "builders": [{"name": "builder-x", "driver": "docker-container", "status": "running"},
                                           BOOTED_DEFAULT]}, "builder-x"),
    ({"current": "k8s", "builders": [{"name": "k8s", "driver": "kubernetes", "status": "running"}, BOOTED_DEFAULT]},
     "k8s"),
])
def test_container_builder_is_refused_for_a_registry_on_localhost(tmp_path, state, name):
    proc, calls = run(tmp_path, state=state, **LOCAL)
    assert proc.returncode != 0
    assert f"current buildx builder {name}, whose driver" in text(proc)
    assert 'fork_images_registry="127.0.0.1:5443/kai-fork"' in text(proc)
    assert "cannot push to 127.0.0.1:5443 on localhost" in text(proc)
    assert "Nothing was changed" in text(proc)
    assert calls == ["buildx ls", "buildx inspect"]


def test_inactive_current_container_builder_is_started_for_a_network_registry(tmp_path):
    state = {"current": "builder-x", "emulators": ["arm64"],
             "builders": [{"name": "builder-x", "driver": "docker-container", "status": "inactive"}, BOOTED_DEFAULT]}
    proc, calls = run(tmp_path, state=state, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert calls == ["buildx ls", "buildx inspect", "buildx inspect --bootstrap -- builder-x", "buildx ls",
                     "buildx inspect"]


def test_no_docker_daemon_fails_with_a_named_failure(tmp_path):
    proc, calls = run(tmp_path, state={"daemon": False}, **REMOTE)
    assert proc.returncode != 0
    assert "daemon_unreachable" in proc.stdout and "the Docker daemon does not answer" in text(proc)
    assert calls == ["buildx ls"]


def test_gpu_fractioning_on_several_platforms_gets_a_dedicated_builder(tmp_path):
    proc, calls = run(tmp_path, fork_images_gpu_fractioning_platforms=TWO, **REMOTE)
    assert proc.returncode == 0, proc.stdout
    assert calls == [
        "buildx ls", "buildx inspect", "buildx inspect -- kai-multiarch",
        "buildx create --name kai-multiarch --driver docker-container",
        "buildx inspect --bootstrap -- kai-multiarch",
        "buildx ls", "buildx inspect", "buildx inspect -- kai-multiarch",
        "run --privileged --rm tonistiigi/binfmt --install arm64",
        "buildx ls", "buildx inspect", "buildx inspect -- kai-multiarch",
    ]
    state = json.loads((tmp_path / "docker" / "state.json").read_text())
    assert state["current"] == "default"                     # the dedicated builder is never made current
    again, calls = run(tmp_path, fork_images_gpu_fractioning_platforms=TWO, **REMOTE)
    assert again.returncode == 0 and changed(again) == 0, again.stdout
    assert calls == ["buildx ls", "buildx inspect", "buildx inspect -- kai-multiarch"]


def test_gpu_fractioning_on_several_platforms_to_localhost_is_refused(tmp_path):
    proc, calls = run(tmp_path, fork_images_gpu_fractioning_platforms=TWO, **LOCAL)
    assert proc.returncode != 0
    assert "cannot reach 127.0.0.1:5443 on localhost" in text(proc)
    assert "the builder kai-multiarch, whose driver docker-container" in text(proc)
    assert "Nothing was changed" in text(proc)
    assert not any("create" in c for c in calls)


def test_existing_dedicated_builder_with_another_driver_is_refused(tmp_path):
    state = {"builders": [BOOTED_DEFAULT, {"name": "kai-multiarch", "driver": "docker", "status": "running"}]}
    proc, calls = run(tmp_path, state=state, fork_images_gpu_fractioning_platforms=TWO, **REMOTE)
    assert proc.returncode != 0
    assert "exists with the driver docker, not docker-container" in text(proc)
    assert not any(c.startswith(("buildx create", "run")) for c in calls)


def test_emulation_that_does_not_take_fails_naming_builder_and_platform(tmp_path):
    proc, _calls = run(tmp_path, state=dict(CONTAINER_CURRENT, binfmt_takes=False),
                       fork_images_kai_scheduler_platforms=TWO, **REMOTE)
    assert proc.returncode != 0
    assert "The builder builder-x (docker-container, running) cannot build linux/arm64" in text(proc)
    assert "check binfmt_misc" in text(proc)


def test_several_platforms_announce_the_guides_buildx_command(tmp_path):
    """build.yml alone in check mode: what each fork's make would run."""
    proc, _calls = run(tmp_path, check=True, tasks_from="build.yml", fork_images_gpu_fractioning_platforms=TWO,
                       fork_images_tag="t1", **REMOTE)
    assert proc.returncode == 0, proc.stdout
    out = text(proc)
    assert ("Would run in /var/tmp/smshare/kai-forks/kai-gpu-fractioning: BUILDX_BUILDER=kai-multiarch make "
            "docker-buildx DOCKER_BUILD_PLATFORM=linux/amd64,linux/arm64 "
            "DOCKER_REPO_BASE=registry.example.com/team/kai-fork/kai-gpu-fractioning VERSION=t1") in out
    # KAI-Scheduler by default: the guide's command, no DOCKER_BUILD_PLATFORM (the Makefile builds the host's)
    assert ("Would run in /var/tmp/smshare/kai-forks/KAI-Scheduler: make build "
            "DOCKER_REPO_BASE=registry.example.com/team/kai-fork/kai-scheduler DOCKER_TAG=t1 "
            "DOCKER_BUILDX_ADDITIONAL_ARGS=--push (extra environment") in out
    assert out.count("DOCKER_BUILD_PLATFORM=") == 1                      # gpu-fractioning's only


@pytest.mark.parametrize("platforms, passed", [
    ([HOST], None),                                                     # the host's own: as the default
    (TWO, "linux/amd64,linux/arm64"),
    (["linux/arm64" if HOST == "linux/amd64" else "linux/amd64"], "other"),
], ids=["host", "two", "other"])
def test_kai_gets_docker_build_platform_only_for_other_platforms(tmp_path, platforms, passed):
    proc, _calls = run(tmp_path, check=True, tasks_from="build.yml", fork_images_kai_scheduler_platforms=platforms,
                       fork_images_tag="t1", **REMOTE)
    assert proc.returncode == 0, proc.stdout
    out = text(proc)
    announced = out.split("KAI-Scheduler: make build ")[1].split(";")[0]
    if passed is None:
        assert "DOCKER_BUILD_PLATFORM" not in announced
    else:
        assert f"DOCKER_BUILD_PLATFORM={','.join(platforms)} " in announced

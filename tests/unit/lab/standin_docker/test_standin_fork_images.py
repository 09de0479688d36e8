# Apache-2.0
"""The stand-in KAI-Scheduler Makefile and hack/standin-image.sh behave as
upstream's make build and docker buildx do (lab/standin/forks; sources in the
lead's CONTRACT.md): the host's platform unless DOCKER_BUILD_PLATFORM says
otherwise, `make push` an alias of build that pushes nothing, the docker
driver refusing several platforms, a docker-container builder keeping nothing
without --push and unable to reach a registry on localhost.

buildah is a recording stub here (and the base layer a stub file): what is
asserted is which images would be built and pushed, not the images.
"""
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
FORKS = REPO / "lab" / "standin" / "forks"
HOST = "linux/" + {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
BOTH = "linux/amd64,linux/arm64"
SERVICES = 15
MULTI_ERROR = "ERROR: Multi-platform build is not supported for the docker driver."
NO_OUTPUT = ("WARNING: No output specified with docker-container driver. Build result will only remain in the "
             "build cache. To push result image into registry use --push or to load image into docker use --load")
CONTAINER = {"current": "kai-builder", "builders": [
    {"name": "kai-builder", "driver": "docker-container", "status": "running"},
    {"name": "default", "driver": "docker", "status": "running"}]}

STUB_BUILDAH = """#!/bin/sh
echo "$*" >>"$STUB_BUILDAH_LOG"
case "$*" in *"manifest inspect"*) exit 1 ;; esac
exit 0
"""
STUB_BASE = """import os, sys
os.makedirs(sys.argv[1], exist_ok=True)
path = os.path.join(sys.argv[1], "standin-base-stub.tar")
open(path, "ab").close()
print(path)
"""


class Fork:
    """A KAI-Scheduler stand-in fork checkout (Makefile + hack/) with a recording buildah."""

    def __init__(self, root):
        self.root = root
        self.dir = root / "KAI-Scheduler"
        hack = self.dir / "hack"
        (hack / "standin" / "controllers" / "standin").mkdir(parents=True)
        shutil.copy(FORKS / "kai-scheduler" / "Makefile", self.dir / "Makefile")
        for name in ("standin-image.sh", "standin-record.py"):
            shutil.copy(FORKS / "hack" / name, hack / name)
        (hack / "standin-base.py").write_text(STUB_BASE)
        subprocess.run(["git", "init", "-q", str(self.dir)], check=True)
        subprocess.run(["git", "-C", str(self.dir), "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"],
                       check=True)
        subprocess.run(["git", "-C", str(self.dir), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm",
                        "fork"], check=True)
        self.bin = root / "bin"
        self.bin.mkdir()
        (self.bin / "buildah").write_text(STUB_BUILDAH)
        (self.bin / "buildah").chmod(0o755)
        self.docker = root / "docker"
        self.docker.mkdir()
        self.buildah_log = root / "buildah.log"
        self.record = root / "record.jsonl"

    def state(self, state):
        (self.docker / "state.json").write_text(json.dumps(state))

    def env(self, **extra):
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}", STUB_BUILDAH_LOG=str(self.buildah_log),
                   STANDIN_DOCKER_STATE=str(self.docker), STANDIN_MAKE_RECORD=str(self.record))
        env.pop("BUILDX_BUILDER", None)
        env.update(extra)
        return env

    def make(self, *args, **extra):
        return subprocess.run(["make", "--no-print-directory", *args], cwd=self.dir, env=self.env(**extra),
                              text=True, capture_output=True, check=False)

    def buildx(self, ref, platforms, push="", **extra):
        return subprocess.run(["bash", "hack/standin-image.sh", "buildx", ref, platforms, push], cwd=self.dir,
                              env=self.env(**extra), text=True, capture_output=True, check=False)

    def buildah(self):
        return self.buildah_log.read_text().splitlines() if self.buildah_log.exists() else []

    def built(self):
        """(ref, platforms) of every image build (the base layer's builds aside)."""
        found = []
        for line in self.buildah():
            words = line.split()
            if "build" in words and "--manifest" in words and "smshare-standin-base" not in line:
                found.append((words[words.index("--manifest") + 1], words[words.index("--platform") + 1]))
        return found

    def pushed(self):
        return [line for line in self.buildah() if " push " in f" {line} "]

    def records(self):
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []


@pytest.fixture()
def fork(tmp_path):
    return Fork(tmp_path)


BASE = "registry.example.com/team/kai-fork/kai-scheduler"


def test_make_build_builds_the_host_platform_when_no_platform_is_given(fork):
    out = fork.make("build", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t1")
    assert out.returncode == 0, out.stderr
    assert f">>> building helm-hooks ({HOST})" in out.stdout
    built = fork.built()
    assert len(built) == SERVICES and {p for _ref, p in built} == {HOST}
    assert (f"{BASE}/scheduler:t1", HOST) in built
    assert fork.pushed() == []                               # docker driver, no --push: loaded, not pushed
    assert fork.records()[0]["vars"] == {"DOCKER_REPO_BASE": BASE, "DOCKER_TAG": "t1"}


def test_make_push_is_an_alias_of_build_and_pushes_nothing(fork):
    out = fork.make("push", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t1")
    assert out.returncode == 0, out.stderr
    assert len(fork.built()) == SERVICES and fork.pushed() == []
    assert fork.records()[0]["goals"] == ["push"]
    both = fork.make("build", "push", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t2")
    assert both.returncode == 0, both.stderr
    assert len([r for r, _p in fork.built() if r.endswith(":t2")]) == SERVICES     # each image once
    assert fork.pushed() == []
    # no recipe of its own: `make -n push` runs build's commands, none of which pushes
    dry_push, dry_build = fork.make("-n", "push").stdout, fork.make("-n", "build").stdout
    assert dry_push.replace('"push"', '"build"', 1) == dry_build
    assert "--push" not in dry_push and "standin-image.sh push" not in dry_push


def test_only_buildx_push_pushes(fork):
    out = fork.make("build", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t1", "DOCKER_BUILDX_ADDITIONAL_ARGS=--push")
    assert out.returncode == 0, out.stderr
    assert len(fork.pushed()) == SERVICES
    assert f"manifest push --quiet --all {BASE}/binder:t1 docker://{BASE}/binder:t1" in fork.buildah()


@pytest.mark.parametrize("state, extra", [
    (None, {}),                                                              # no state: "default", docker
    ({"current": "desktop", "builders": [{"name": "desktop", "driver": "docker", "status": "running"}]}, {}),
    (CONTAINER, {"BUILDX_BUILDER": "default"}),                              # BUILDX_BUILDER wins over current
], ids=["default", "current-docker-driver", "buildx-builder-env"])
def test_docker_driver_refuses_two_platforms(fork, state, extra):
    if state:
        fork.state(state)
    out = fork.make("build", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t1", f"DOCKER_BUILD_PLATFORM={BOTH}",
                    "DOCKER_BUILDX_ADDITIONAL_ARGS=--push", **extra)
    assert out.returncode != 0
    assert MULTI_ERROR in out.stderr
    assert fork.built() == [] and fork.pushed() == []


def test_container_builder_without_push_warns_exits_0_and_leaves_no_image(fork):
    fork.state(CONTAINER)
    out = fork.make("build", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t1", f"DOCKER_BUILD_PLATFORM={BOTH}")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count(NO_OUTPUT) == SERVICES
    assert fork.buildah() == []                              # nothing in local storage, nothing pushed


@pytest.mark.parametrize("registry, dial", [
    ("127.0.0.1:5443/kai-fork", "127.0.0.1:5443"),
    ("localhost:5000/kai-fork", "127.0.0.1:5000"),
    ("127.0.0.2/kai-fork", "127.0.0.2:443"),
])
def test_container_builder_cannot_push_to_localhost(fork, registry, dial):
    fork.state(CONTAINER)
    ref = f"{registry}/kai-scheduler/binder:t1"
    out = fork.buildx(ref, BOTH, "--push")
    assert out.returncode == 1
    assert f"failed to push {ref}: " in out.stderr
    assert f"dial tcp {dial}: connect: connection refused" in out.stderr
    assert fork.buildah() == []


def test_container_builder_pushes_both_platforms_to_a_network_registry(fork):
    fork.state(CONTAINER)
    out = fork.make("build", f"DOCKER_REPO_BASE={BASE}", "DOCKER_TAG=t1", f"DOCKER_BUILD_PLATFORM={BOTH}",
                    "DOCKER_BUILDX_ADDITIONAL_ARGS=--push")
    assert out.returncode == 0, out.stderr
    assert {p for _r, p in fork.built()} == {BOTH} and len(fork.pushed()) == SERVICES
    assert "(builder kai-builder, driver docker-container)" in out.stdout


def test_unknown_builder_is_an_error(fork):
    out = fork.buildx(f"{BASE}/binder:t1", HOST, "--push", BUILDX_BUILDER="nope")
    assert out.returncode == 1 and 'ERROR: no builder "nope" found' in out.stderr
    assert fork.buildah() == []


def test_state_is_found_beside_the_docker_on_path(fork, tmp_path):
    """Without STANDIN_DOCKER_STATE: ../forks/docker/state.json beside the
    folder of the docker on PATH, as the stand-in docker CLI keeps it."""
    lab = tmp_path / "lab"
    (lab / "bin").mkdir(parents=True)
    (lab / "bin" / "docker").write_text("#!/bin/sh\nexit 99\n")
    (lab / "bin" / "docker").chmod(0o755)
    (lab / "forks" / "docker").mkdir(parents=True)
    (lab / "forks" / "docker" / "state.json").write_text(json.dumps(CONTAINER))
    env = fork.env(PATH=f"{lab / 'bin'}:{fork.bin}:{os.environ['PATH']}")
    env.pop("STANDIN_DOCKER_STATE")
    out = subprocess.run(["bash", "hack/standin-image.sh", "buildx", f"{BASE}/binder:t1", BOTH, ""], cwd=fork.dir,
                         env=env, text=True, capture_output=True, check=False)
    assert out.returncode == 0 and NO_OUTPUT in out.stderr

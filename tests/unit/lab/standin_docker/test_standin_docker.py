# Apache-2.0
"""The lab's stand-in docker CLI (lab/standin/docker/docker) prints what real
docker prints: byte for byte where a recording covers the same state, and
parsed alike by the collection's buildx parsers everywhere else."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import buildx

REPO = Path(__file__).resolve().parents[4]
DOCKER = REPO / "lab" / "standin" / "docker" / "docker"
RECORDED = REPO / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "buildx"


@pytest.fixture()
def docker(tmp_path):
    def call(*args, state=None):
        if state is not None:
            (tmp_path / "state.json").write_text(json.dumps(state))
        return subprocess.run([str(DOCKER), *args], env=dict(os.environ, STANDIN_DOCKER_STATE=str(tmp_path)),
                              text=True, capture_output=True, check=False)
    call.calls = lambda: (tmp_path / "calls.log").read_text().splitlines()
    return call


def test_ls_of_a_fresh_engine_is_the_recording(docker):
    assert docker("buildx", "ls").stdout == (RECORDED / "buildx-ls-default-docker.txt").read_text()


def test_a_current_container_builder_lists_as_recorded(docker):
    state = {"current": "builder-x", "builders": [{"name": "builder-x", "driver": "docker-container",
                                                   "status": "running"},
                                                  {"name": "default", "driver": "docker", "status": "running"}]}
    found = docker("buildx", "ls", state=state).stdout
    assert buildx.parse_ls(found) == buildx.parse_ls((RECORDED / "buildx-ls-container-current.txt").read_text())


def test_created_builder_is_inactive_until_booted_then_inspects_as_recorded(docker):
    assert docker("buildx", "create", "--name", "kai-multiarch", "--driver", "docker-container").stdout == "kai-multiarch\n"
    inactive = buildx.parse_inspect(docker("buildx", "inspect", "--", "kai-multiarch").stdout)
    assert (inactive["status"], inactive["platforms"]) == ("inactive", [])
    booted = docker("buildx", "inspect", "--bootstrap", "kai-multiarch")
    recorded = buildx.parse_inspect((RECORDED / "buildx-inspect-multiarch-amd64-only.txt").read_text())
    assert buildx.parse_inspect(booted.stdout) == recorded


def test_binfmt_install_all_gives_the_recorded_platforms(docker):
    docker("buildx", "create", "--name", "kai-multiarch", "--driver", "docker-container")
    out = docker("run", "--privileged", "--rm", "tonistiigi/binfmt", "--install", "all")
    assert out.returncode == 0 and "installing: arm64 OK" in out.stdout
    found = buildx.parse_inspect(docker("buildx", "inspect", "--bootstrap", "kai-multiarch").stdout)
    recorded = buildx.parse_inspect((RECORDED / "buildx-inspect-multiarch-with-qemu.txt").read_text())
    assert sorted(found["platforms"]) == sorted(recorded["platforms"])


def test_binfmt_that_does_not_take_registers_nothing(docker):
    docker("buildx", "ls", state={"binfmt_takes": False})
    assert docker("run", "--privileged", "--rm", "tonistiigi/binfmt", "--install", "arm64").returncode == 0
    assert "linux/arm64" not in buildx.parse_inspect(docker("buildx", "inspect").stdout)["platforms"]


def test_daemon_down_reads_as_the_real_cli_prints_it(docker):
    ls = docker("buildx", "ls", state={"daemon": False})
    assert ls.returncode == 0 and buildx.parse_ls(ls.stdout)[0]["status"] == "error"
    assert ls.stderr == (RECORDED / "composed-ls-daemon-down.stderr").read_text()
    assert ls.stdout == (RECORDED / "composed-ls-daemon-down.txt").read_text()
    inspect = buildx.parse_inspect(docker("buildx", "inspect").stdout)
    assert inspect["status"] == "error" and "Cannot connect to the Docker daemon" in inspect["error"]
    assert docker("run", "--privileged", "--rm", "tonistiigi/binfmt", "--install", "arm64").returncode == 125


def test_missing_builder_and_unsupported_calls(docker):
    missing = docker("buildx", "inspect", "--", "nope")
    assert missing.returncode == 1 and 'no builder "nope" found' in missing.stderr
    other = docker("build", "-t", "x", ".")
    assert other.returncode == 99 and "STAND-IN docker: unsupported" in other.stderr
    assert docker.calls() == ["buildx inspect -- nope", "build -t x ."]

# Apache-2.0
"""The docker buildx parsers on recorded and composed output (fixtures/buildx/README.md)."""
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import buildx

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "buildx"


def fixture(name):
    return (FIXTURES / name).read_text()


def summary(builders):
    return [(b["name"], b["driver"], b["current"], b["status"], [n["name"] for n in b["nodes"]]) for b in builders]


@pytest.mark.parametrize("name, expected", [
    ("buildx-ls-default-docker.txt", [("default", "docker", True, "running", ["default"])]),
    ("buildx-ls-container-current.txt", [("builder-x", "docker-container", True, "running", ["builder-x0"]),
                                         ("default", "docker", False, "running", ["default"])]),
    ("buildx-ls-old-container-current.txt", [("mybuilder", "docker-container", True, "running", ["mybuilder0"]),
                                             ("default", "docker", False, "running", ["default"])]),
    ("composed-ls-truncated.txt", [("kai-multiarch", "docker-container", False, "inactive", ["kai-multiarch0"]),
                                   ("default", "docker", True, "running", ["default"])]),
    ("composed-ls-daemon-down.txt", [("default", "docker", True, "error", ["default"])]),
])
def test_parse_ls(name, expected):
    assert summary(buildx.parse_ls(fixture(name))) == expected


def test_parse_ls_nodes_keep_endpoint_and_buildkit():
    node = buildx.parse_ls(fixture("buildx-ls-old-container-current.txt"))[0]["nodes"][0]
    assert node == {"name": "mybuilder0", "endpoint": "unix:///var/run/docker.sock", "status": "running",
                    "buildkit": "v0.11.6"}


@pytest.mark.parametrize("name, expected", [
    ("buildx-inspect-multiarch-amd64-only.txt",
     ("kai-multiarch", "docker-container", "running", None,
      ["linux/amd64", "linux/amd64/v2", "linux/amd64/v3", "linux/386"])),
    ("buildx-inspect-multiarch-with-qemu.txt",
     ("kai-multiarch", "docker-container", "running", None,
      ["linux/amd64", "linux/amd64/v2", "linux/amd64/v3", "linux/arm64", "linux/riscv64", "linux/ppc64le",
       "linux/s390x", "linux/386", "linux/mips64le", "linux/mips64", "linux/arm/v7", "linux/arm/v6"])),
    ("buildx-inspect-multiarch-docker-driver.txt",
     ("kai-multiarch", "docker", "running", None, ["linux/amd64", "linux/amd64/v2", "linux/amd64/v3", "linux/386"])),
    ("composed-inspect-default-docker.txt",
     ("default", "docker", "running", None, ["linux/amd64", "linux/amd64/v2", "linux/amd64/v3", "linux/386"])),
    ("composed-inspect-inactive.txt", ("kai-multiarch", "docker-container", "inactive", None, [])),
    ("composed-inspect-node-error.txt",
     ("remote-1", "remote", "error", "failed to list workers: Unavailable: connection error: desc = \"transport: "
      "Error while dialing: dial tcp 203.0.113.7:1234: connect: connection refused\"", [])),
])
def test_parse_inspect(name, expected):
    found = buildx.parse_inspect(fixture(name))
    assert (found["name"], found["driver"], found["status"], found["error"], found["platforms"]) == expected


def test_labels_and_gc_policy_lines_are_not_read_as_nodes():
    found = buildx.parse_inspect(fixture("buildx-inspect-multiarch-with-qemu.txt"))
    assert [n["name"] for n in found["nodes"]] == ["kai-multiarch0"]
    assert found["nodes"][0]["buildkit"] == "v0.13.2"
    assert found["nodes"][0]["endpoint"] == "unix:///var/run/docker.sock"


@pytest.mark.parametrize("text, expected", [
    ("linux/amd64*, linux/arm64/v8, linux/arm64", ["linux/amd64", "linux/arm64"]),
    ("linux/arm/v7, linux/arm/v6", ["linux/arm/v7", "linux/arm/v6"]),
    ("", []),
])
def test_parse_platforms(text, expected):
    assert buildx.parse_platforms(text) == expected


@pytest.mark.parametrize("text", [
    "",
    "NAME  DRIVER\nx  docker\n",                                  # another table
    "ERROR: something\n",
    "NAME/NODE  DRIVER/ENDPOINT  STATUS  BUILDKIT  PLATFORMS\n \\_ orphan  \\_ x  running  v1  linux/amd64\n",
    "NAME/NODE  DRIVER/ENDPOINT  STATUS  BUILDKIT  PLATFORMS\nbad name!  docker\n",
])
def test_parse_ls_refuses_what_it_does_not_know(text):
    with pytest.raises(ValueError):
        buildx.parse_ls(text)


@pytest.mark.parametrize("text", [
    "",
    "Name: x\n",                                                  # no driver
    "Name: x\nDriver: docker\ngarbage line\n",
    "Name: x\nDriver: docker\n\nNodes:\nName: x0\nPlatforms: linux amd64\n",
])
def test_parse_inspect_refuses_what_it_does_not_know(text):
    with pytest.raises(ValueError):
        buildx.parse_inspect(text)

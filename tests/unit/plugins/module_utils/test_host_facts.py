"""The host facts nvidia_driver_info reads for the nvidia_driver role: os-release
as systemd writes it, Ansible's names for the distribution, and the container
runtime from PID 1's environment and the runtimes' marker files."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import host_facts

DEBIAN = '''PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
ID=debian
# a comment
HOME_URL="https://www.debian.org/"
'''
UBUNTU = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'


@pytest.mark.parametrize("text, debian_version, facts", [
    (DEBIAN, "12.8\n", {"distribution": "Debian", "distribution_version": "12.8", "distribution_major_version": "12"}),
    (DEBIAN, "trixie/sid\n", {"distribution": "Debian", "distribution_version": "12",
                              "distribution_major_version": "12"}),
    (UBUNTU, "trixie/sid\n", {"distribution": "Ubuntu", "distribution_version": "24.04",
                              "distribution_major_version": "24"}),
    ('NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.4"\n', None,
     {"distribution": "Rocky Linux", "distribution_version": "9.4", "distribution_major_version": "9"}),
    ("", None, {"distribution": "", "distribution_version": "", "distribution_major_version": ""}),
], ids=["debian-point-release", "debian-testing", "ubuntu", "other", "none"])
def test_the_distribution_as_ansible_names_it(text, debian_version, facts):
    assert host_facts.distribution(host_facts.parse_os_release(text), debian_version) == facts


def test_os_release_reads_quotes_as_the_shell_does():
    found = host_facts.parse_os_release("A='one two'\nB=\"x \\\"y\\\"\"\nC=\nbroken line\nD=\"unclosed\n")
    assert found == {"A": "one two", "B": 'x "y"', "C": ""}


@pytest.mark.parametrize("environ, existing, kind", [
    ("PATH=/usr/bin\0container=podman\0", [], "podman"),
    ("container=lxc\0", ["/.dockerenv"], "lxc"),
    ("container=\0", ["/run/.containerenv"], "podman"),
    (None, ["/.dockerenv"], "docker"),
    ("HOME=/\0", [], ""),
    (None, [], ""),
], ids=["podman-systemd", "environ-first", "empty-environ-marker", "docker-marker", "host", "unreadable"])
def test_the_container_runtime(environ, existing, kind):
    assert host_facts.container_type(environ, existing) == kind


def test_read_names_every_fact_the_role_uses():
    facts = host_facts.read()
    assert set(facts) == {"distribution", "distribution_version", "distribution_major_version", "architecture",
                          "kernel", "virtualization_type", "virtualization_role"}
    assert facts["kernel"] and facts["architecture"]
    assert facts["virtualization_role"] == ("guest" if facts["virtualization_type"] else "")

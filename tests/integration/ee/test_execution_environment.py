"""The execution environment (execution-environment.yml) as AWX would run it:
`ansible-builder create` gives a complete build context (checked file by file),
the context builds with podman from the locally made base image (no registry,
no index during the build), and `ansible-playbook smshare.kai.gpu_facts` runs
inside the built image, over SSH, against a GPU-node container made from the
lab's node image.

The node is a container of its own (not one of the lab's GPU nodes, which other
tests converge): a PCIe A100 node, no NVSwitches, the stand-in r615 driver
installed and loaded, reached over SSH with a key of its own (the node image
has sshd, as the lab's GPU nodes do)."""
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[3]
INSTANCE = os.environ.get("SMSHARE_LAB_INSTANCE", "0")
IMAGE = "localhost/smshare-kai-ee:test-%s" % INSTANCE
NODE = "smshare-lab%s-ee-node" % INSTANCE
CONTEXT = REPO / "build" / "ee-context"

pytestmark = pytest.mark.slow


def sh(argv, check=True, input_text=None, timeout=900):
    proc = subprocess.run(argv, cwd=REPO, text=True, capture_output=True, check=False,
                          input=input_text, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail("%s failed (%s):\n%s\n%s"
                    % (shlex.join(argv), proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc


def pins():
    """{lowercase name: version} of requirements/python.txt."""
    lines = (REPO / "requirements" / "python.txt").read_text().splitlines()
    return {n.lower(): v for n, v in (line.split("==") for line in lines if "==" in line)}


def galaxy():
    return yaml.safe_load((REPO / "galaxy.yml").read_text())


@pytest.fixture(scope="module")
def context():
    start = time.monotonic()
    sh(["bash", "scripts/ee.sh", "create"])
    print("\n[ee] inputs + ansible-builder create: %.0f s" % (time.monotonic() - start))
    return CONTEXT


def test_create_gives_a_complete_build_context(context):
    files = sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file())
    assert files == [
        "Containerfile",
        "_build/collections/smshare-kai.tar.gz",
        "_build/requirements.txt",
        "_build/requirements.yml",
        "_build/scripts/assemble",
        "_build/scripts/check_ansible",
        "_build/scripts/check_galaxy",
        "_build/scripts/entrypoint",
        "_build/scripts/install-from-bindep",
        "_build/scripts/introspect.py",
        "_build/scripts/pip_install",
    ]
    # Every package pip installs in the image is there as a wheel, at its pin
    # (mounted into the build, not part of the context).
    have = {}
    for wheel in (REPO / "build" / "ee-inputs" / "wheels").glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        have[re.sub(r"[-_.]+", "-", name).lower()] = version
    frozen = pins()
    for name in ("ansible", "ansible-core", "ansible-runner", "kubernetes", "jmespath", "pyyaml",
                 "bindep", "packaging", "requests", "urllib3"):
        assert have.get(name) == frozen[name], (name, have.get(name), frozen[name])
    assert have.get("dumb-init") == "1.2.5"

    containerfile = (context / "Containerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="localhost/smshare-ee-base:debian12"' in containerfile
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==%s ansible-runner==%s"' % (
        frozen["ansible-core"], frozen["ansible-runner"]) in containerfile
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--no-deps --offline"' in containerfile
    assert 'ARG PKGMGR="/usr/local/sbin/pkgmgr"' in containerfile

    # The Python pins are requirements/python.txt's.
    for line in (context / "_build" / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            assert frozen[name.strip().lower()] == version.strip(), line
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements == {"collections": [{"name": "collections/smshare-kai.tar.gz", "type": "file"}]}
    listing = sh(["tar", "-tzf", str(context / "_build" / "collections" / "smshare-kai.tar.gz")]).stdout.split()
    for member in ("MANIFEST.json", "meta/execution-environment.yml", "meta/ee-requirements.txt",
                   "meta/ee-bindep.txt", "plugins/modules/gpu_info.py", "playbooks/gpu_facts.yml"):
        assert member in listing


@pytest.fixture(scope="module")
def image(context):
    start = time.monotonic()
    proc = sh(["bash", "scripts/ee.sh", "build", IMAGE], timeout=1800)
    steps = "".join(line + "\n" for line in proc.stderr.splitlines() if line.startswith("ee:"))
    print("\n[ee] image build: %.0f s\n%s" % (time.monotonic() - start, steps))
    # Kept (one tag per lab instance): its layers make the next build warm.
    return IMAGE


def in_image(image, *argv):
    return sh(["podman", "run", "--rm", image, *argv])


def test_the_image_holds_the_collection_its_dependencies_and_nothing_of_the_build(image):
    """The build's wheels and pip.conf were mounts: only their empty mount points remain."""
    listed = json.loads(in_image(image, "ansible-galaxy", "collection", "list", "--format", "json").stdout)
    found = {}
    for path_collections in listed.values():
        for name, info in path_collections.items():
            found.setdefault(name, info["version"])
    assert found["smshare.kai"] == galaxy()["version"]
    for name, spec in galaxy()["dependencies"].items():
        assert name in found, name
        assert found[name] in SpecifierSet(spec), (name, found[name], spec)
    out = in_image(image, "sh", "-c",
                   "id -u; ssh -V 2>&1; python3 -c 'import kubernetes, jmespath, yaml; print(kubernetes.__version__)';"
                   " ansible-runner --version; test ! -s /etc/pip.conf && test -z \"$(ls -A /opt/smshare-wheels)\" && echo clean;"
                   " ansible-doc -t module smshare.kai.gpu_info | head -1").stdout.split("\n")
    assert out[0] != "0", "the image runs as root"
    assert out[1].startswith("OpenSSH_")
    assert out[2] == pins()["kubernetes"]
    assert out[3] == pins()["ansible-runner"]
    assert out[4] == "clean"
    assert "smshare.kai.gpu_info" in out[5]


def start_node(image):
    sh(["podman", "rm", "-f", "-t", "5", NODE], check=False)
    sh(["podman", "run", "-d", "--name", NODE, "--hostname", NODE, "--systemd=always",
        "--stop-signal", "SIGRTMIN+3", image, "/sbin/init"])
    deadline = time.monotonic() + 90
    while sh(["podman", "exec", NODE, "systemctl", "is-system-running"], check=False).stdout.strip() \
            not in ("running", "degraded"):
        assert time.monotonic() < deadline, "systemd did not come up in " + NODE
        time.sleep(0.5)


@pytest.fixture(scope="module")
def gpu_node(tmp_path_factory):
    """A GPU-node container (the lab's node image) with the stand-in driver loaded."""
    tmp = tmp_path_factory.mktemp("ee-node")
    try:
        start_node(sh(["bash", "lab/node-image.sh"]).stdout.strip().splitlines()[-1])
        driver = json.dumps({"version": "615.71.09", "branch": 615, "cuda_version": "13.4", "open": True})
        hardware = json.dumps({"gpus": [{"name": "NVIDIA A100-PCIE-80GB",
                                         "uuid": "GPU-7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
                                         "pci_bus_id": "00000000:17:00.0", "memory_total_mib": 81920,
                                         "multiprocessor_count": 108, "compute_cap": "8.0"}], "nvswitches": 0})
        sh(["podman", "cp", str(REPO / "lab" / "standin" / "bin" / "nvidia-smi"), NODE + ":/usr/bin/nvidia-smi"])
        seed = ("set -e; mkdir -p /usr/share/nvidia-standin /run/nvidia-standin /etc/nvidia-standin;"
                "echo '%s' > /usr/share/nvidia-standin/driver.json; cp /usr/share/nvidia-standin/driver.json"
                " /run/nvidia-standin/loaded.json; echo '%s' > /etc/nvidia-standin/gpus.json;"
                "mkdir -p -m 700 /root/.ssh; cat > /root/.ssh/authorized_keys; systemctl is-active --quiet ssh"
                % (driver, hardware))
        key = tmp / "id_ed25519"
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
        sh(["podman", "exec", "-i", NODE, "sh", "-c", seed], input_text=(tmp / "id_ed25519.pub").read_text())
        address = sh(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", NODE]).stdout.strip()
        # The image runs as uid 1000: the key and the inventory are its own.
        (tmp / "hosts.yml").write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {NODE: {
            "ansible_host": address, "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": "/runner/node/id_ed25519",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}}}}))
        for path in (tmp, key, tmp / "hosts.yml"):
            os.chown(path, 1000, 0)
        yield tmp
    finally:
        sh(["podman", "rm", "-f", "-t", "5", NODE], check=False)


def run_in_image(image, node_dir, *argv):
    return sh(["podman", "run", "--rm", "-v", "%s:/runner/node:Z" % node_dir, image, *argv], check=False)


def test_gpu_facts_runs_inside_the_image_against_a_gpu_node(image, gpu_node):
    proc = run_in_image(image, gpu_node, "ansible-playbook", "smshare.kai.gpu_facts", "-i", "/runner/node/hosts.yml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "driver 615.71.09 (CUDA 13.4), 1 GPU(s): NVIDIA A100-PCIE-80GB" in proc.stdout
    assert re.search(r"%s\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0" % NODE, proc.stdout), proc.stdout

    # A node off the pinned branch fails the play with the play's message, from inside the image too.
    sh(["podman", "exec", NODE, "sh", "-c",
        "sed -i 's/615.71.09/580.95.05/; s/\"branch\": 615/\"branch\": 580/' "
        "/usr/share/nvidia-standin/driver.json /run/nvidia-standin/loaded.json"])
    proc = run_in_image(image, gpu_node, "ansible-playbook", "smshare.kai.gpu_facts", "-i", "/runner/node/hosts.yml")
    assert proc.returncode != 0
    assert "runs driver 580.95.05, not branch 615" in proc.stdout, proc.stdout[-4000:]

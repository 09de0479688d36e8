# Apache-2.0
"""Fixtures for the fork_images role and registry_image_info against a real registry.

Own registry (lab/registry.sh in a temp state dir, free port, TLS + htpasswd),
own stand-in fork repositories (lab/standin/forks/make-forks.sh) and the lab's
stand-in docker CLI (lab/standin/docker) on the build host's PATH with its own
state: these tests do not need the whole lab.
"""
import dataclasses
import json
import os
import platform
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry_state import Registry

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "images.yml"
STANDIN_DOCKER = REPO / "lab" / "standin" / "docker"
KAI_SERVICES = ["podgrouper", "scheduler", "binder", "resourcereservation", "snapshot-tool", "scalingpod",
                "nodescaleadjuster", "podgroupcontroller", "queuecontroller", "fairshare-simulator",
                "admission", "operator", "time-based-fairshare-simulator", "numa-placement-exporter",
                "helm-hooks"]
FRAC_IMAGES = ["operator", "mpsd", "fractiond", "metricsd"]
# The build host's platform as KAI-Scheduler's Makefile derives it (uname -m, x86_64 -> amd64,
# aarch64 -> arm64): the role's default for KAI-Scheduler.
HOST_PLATFORM = "linux/" + {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
BOTH = ["linux/amd64", "linux/arm64"]


def base_env():
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               CONTAINERS_CONF=str(REPO / "molecule" / "containers.conf"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    return env


def _add_host_name_to_certificate(state, name):
    """Re-sign the registry's server certificate (lab/registry.sh keeps an existing one)
    with this machine's host name beside 127.0.0.1 and localhost."""
    srv = state / "server"
    (srv / "ext.cnf").write_text(f"subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:{name}\n"
                                 "extendedKeyUsage=serverAuth\n")
    for argv in (["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(srv / "tls.key"),
                  "-out", str(srv / "tls.csr"), "-subj", "/CN=127.0.0.1"],
                 ["openssl", "x509", "-req", "-in", str(srv / "tls.csr"), "-CA", str(state / "ca.crt"),
                  "-CAkey", str(srv / "ca.key"), "-CAserial", str(srv / "ca.srl"), "-days", "30",
                  "-extfile", str(srv / "ext.cnf"), "-out", str(srv / "tls.crt")]):
        subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture(scope="session")
def image_registry(tmp_path_factory):
    """The registry on 127.0.0.1; its certificate also names this machine (see registry_by_name)."""
    state = tmp_path_factory.mktemp("registry")
    script = REPO / "lab" / "registry.sh"
    env = dict(base_env(), SMSHARE_REGISTRY_PORT="0")

    def registry(action):
        proc = subprocess.run(["bash", str(script), action, str(state)], env=env, text=True, capture_output=True,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    registry("up")
    _add_host_name_to_certificate(state, socket.gethostname())
    registry("down")
    registry("up")
    yield Registry.from_state_dir(state)
    subprocess.run(["bash", str(script), "down", str(state)], env=env, capture_output=True, check=False)


def _forward(listener, target):
    """Relay every connection to `listener` to `target` (TLS passes through untouched)."""
    def pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        try:
            client, _addr = listener.accept()
        except OSError:
            return
        upstream = socket.create_connection(target)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(src, dst), daemon=True).start()


@pytest.fixture(scope="session")
def registry_by_name(image_registry):
    """The same registry under this machine's host name (host:port, no localhost in it), as a
    build host reaches a registry over the network: the role lets a docker-container builder
    push there. Where the name resolves to another local address than 127.0.0.1, a relay on
    that address forwards to the registry."""
    name = socket.gethostname()
    host, port = image_registry.address.rsplit(":", 1)
    try:
        address = socket.gethostbyname(name)
    except OSError as exc:
        pytest.fail(f"this machine's host name {name} does not resolve ({exc}): the multi-platform tests need "
                    f"it to (add it to /etc/hosts with a local address)")
    if address == host:
        yield dataclasses.replace(image_registry, address=f"{name}:{port}")
        return
    listener = socket.socket()
    try:
        listener.bind((address, 0))
    except OSError as exc:
        pytest.fail(f"this machine's host name {name} resolves to {address}, which is not local ({exc}): the "
                    f"multi-platform tests need a local address for it (/etc/hosts)")
    listener.listen(16)
    threading.Thread(target=_forward, args=(listener, (host, int(port))), daemon=True).start()
    yield dataclasses.replace(image_registry, address=f"{name}:{listener.getsockname()[1]}")
    listener.close()


@pytest.fixture(scope="session")
def stand_in_forks(tmp_path_factory):
    out = tmp_path_factory.mktemp("forks")
    subprocess.run(["bash", str(REPO / "lab/standin/forks/make-forks.sh"), str(out)], check=True,
                   capture_output=True)
    return json.loads((out / "forks.json").read_text())


@dataclass
class Outcome:
    rc: int
    output: str
    wall_s: float

    @property
    def recap(self):
        m = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", self.output)
        assert m, "no PLAY RECAP in output:\n" + self.output[-3000:]
        return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups())))


class ForkImages:
    """One build host's worth of state (clones, buildah storage, records) in a temp dir."""

    def __init__(self, root, registry, forks):
        self.root = Path(root)
        self.registry = registry
        self.forks = forks
        self.workdir = self.root / "work"
        self.docker = self.root / "docker"      # the stand-in docker's state (builders, QEMU)
        self.auth_file = self.root / "auth.json"
        self.vars_file = self.root / "vars.json"
        self.token = "tok-" + uuid.uuid4().hex
        self.record = self.root / "make-record.jsonl"
        self.manifest = self.root / "manifest.json"
        self.inventory = self.root / "hosts.yml"
        self.inventory.write_text(
            "all:\n  children:\n    build_hosts:\n      hosts:\n        buildhost:\n"
            "          ansible_connection: local\n"
            f"          ansible_python_interpreter: {sys.executable}\n")

    def vars(self, **overrides):
        reg = self.registry
        env = {"STANDIN_BUILDAH_ROOT": str(self.root / "buildah"), "STANDIN_CERT_DIR": reg.cert_dir,
               "REGISTRY_AUTH_FILE": str(self.auth_file), "STANDIN_MAKE_RECORD": str(self.record),
               # stands for a proxy or GOPROXY token: must never be shown or left behind
               "SMSHARE_TEST_PROXY_TOKEN": self.token}
        env.update(overrides.pop("extra_env", {}))
        data = {
            "fork_images_kai_scheduler_repo_url": self.forks["kai_scheduler"]["url"],
            "fork_images_kai_scheduler_pr_ref": self.forks["kai_scheduler"]["pr_ref"],
            "fork_images_kai_scheduler_commit": self.forks["kai_scheduler"]["commit"],
            "fork_images_gpu_fractioning_repo_url": self.forks["gpu_fractioning"]["url"],
            "fork_images_gpu_fractioning_pr_ref": self.forks["gpu_fractioning"]["pr_ref"],
            "fork_images_gpu_fractioning_commit": self.forks["gpu_fractioning"]["commit"],
            "fork_images_workdir": str(self.workdir),
            "fork_images_registry": reg.address + "/kai-fork",
            "fork_images_registry_username": reg.username,
            "fork_images_registry_password": reg.password,
            "fork_images_registry_ca_file": reg.ca,
            "fork_images_registry_login_tool": "buildah",
            "fork_images_build_environment": env,
            "fork_images_build_poll_interval": 2,
            "fork_images_build_report_interval": 1,   # a progress line at each poll (the stand-in builds take seconds)
            "fork_images_manifest_path": str(self.manifest),
        }
        data.update(overrides)
        return data

    def env(self):
        env = base_env()
        env.update(PATH=f"{STANDIN_DOCKER}:{env['PATH']}", STANDIN_DOCKER_STATE=str(self.docker))
        return env

    def _argv(self, args, drop, overrides):
        data = self.vars(**overrides)
        for name in drop:
            data.pop(name)
        self.vars_file.write_text(json.dumps(data))
        return ["ansible-playbook", "-i", str(self.inventory), str(PLAYBOOK), "-e", f"@{self.vars_file}", *args]

    def play(self, *args, drop=(), env=None, **overrides):
        """Run playbooks/images.yml; `drop` leaves variables unset, `env` adds
        to ansible-playbook's environment."""
        argv = self._argv(args, drop, overrides)
        start = time.monotonic()
        proc = subprocess.run(argv, env=dict(self.env(), **(env or {})), text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, cwd=REPO, check=False)
        return Outcome(proc.returncode, proc.stdout, time.monotonic() - start)

    def start(self, output, *args, **overrides):
        """Start playbooks/images.yml in a session of its own (as from a terminal), its
        output to the file `output`; returns the Popen."""
        argv = self._argv(args, (), overrides)
        with open(output, "w", encoding="utf-8") as out:
            return subprocess.Popen(argv, env=self.env(), stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                    start_new_session=True)

    def docker_calls(self):
        log = self.docker / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def records(self):
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def refs(self, tag):
        base = self.registry.address + "/kai-fork"
        return ([f"{base}/kai-gpu-fractioning/{i}:{tag}" for i in FRAC_IMAGES]
                + [f"{base}/kai-scheduler/{s}:{tag}" for s in KAI_SERVICES])

    def default_tag(self):
        return "smshare-%s-%s" % (self.forks["kai_scheduler"]["commit"][:7],
                                  self.forks["gpu_fractioning"]["commit"][:7])


def registry_client(registry):
    from ansible_collections.smshare.kai.plugins.module_utils.registry import RegistryClient
    return RegistryClient(username=registry.username, password=registry.password, ca_file=registry.ca)

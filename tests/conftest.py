"""Shared pytest fixtures: the local lab (lab/labctl), up once per test session.

    def test_something(lab):
        lab.kubectl("get", "ns")                     # CompletedProcess, check=True
        lab.playbook("play.yml", extra_vars={...})   # ansible-playbook against inventories/lab
        lab.kubeconfig, lab.registry.address, lab.registry.ca, lab.gpu_nodes ...

Tests marked `lab_nodes` make the session's lab start the node tier too
(kubelet + containerd: real pods; SMSHARE_LAB_NODES=1 does it for every
session); `lab_fleet(n)` makes it start the fleet (`labctl up --fleet`: each
GPU-node container a Kubernetes Node through the lab's node agent) with at
least n GPU-node containers. The lab goes down at the end of the session unless SMSHARE_LAB_KEEP=1
or it was already up when the session began, or another live session still uses
it (leases in .lab/sessions/: several sessions on one machine share the lab).
Tests marked `lab_teardown` run last (they take the lab down themselves).
"""
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from registry_state import Registry

REPO = Path(__file__).resolve().parents[1]
LABCTL = REPO / "lab" / "labctl"
STATE = Path(os.environ.get("SMSHARE_LAB_STATE", REPO / ".lab"))


def pytest_configure(config):
    config.addinivalue_line("markers", "lab_nodes: needs the lab's node tier (kubelet + containerd, real pods)")
    config.addinivalue_line("markers", "lab_fleet(n): needs at least n GPU-node containers (Kubernetes Nodes)")
    config.addinivalue_line("markers", "lab_teardown: takes the lab down; runs after every other test")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # make test runs the `lab` tests as a stream of their own: a test that takes
    # the lab without the marker would start a second lab user in the other one.
    unmarked = [item.nodeid for item in items
                if "lab" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("lab")]
    if unmarked:
        raise pytest.UsageError("tests that use the lab fixture need the `lab` marker: " + ", ".join(unmarked))
    last = [item for item in items if item.get_closest_marker("lab_teardown")]
    if last:
        items[:] = [item for item in items if item not in last] + last


@dataclass
class Lab:
    """What tests need from a running lab (read from .lab/lab.json, written by `labctl up`)."""
    root: Path
    state_dir: Path
    kubeconfig: Path
    apiserver: str
    bin_dir: Path
    vault_password_file: Path
    inventory: list
    gpu_nodes: list
    kube_nodes: list
    node_tier: bool
    registry: Optional[Registry]
    standin_apt_url: str
    env: dict = field(default_factory=dict)
    # The lab overlay (lab/smshare_lab/overlay.py): its -i source and the lab's hosts.yml for a copy.
    overlay: str = ""
    overlay_hosts: str = ""

    @classmethod
    def from_facts(cls, facts):
        reg = facts.get("registry") or {}
        lab = cls(
            root=REPO, state_dir=Path(facts["state_dir"]), kubeconfig=Path(facts["kubeconfig"]),
            apiserver=facts["apiserver"], bin_dir=Path(facts["bin_dir"]),
            vault_password_file=Path(facts["vault_password_file"]), inventory=facts["inventory"],
            gpu_nodes=facts["gpu_nodes"], kube_nodes=facts["kube_nodes"], node_tier=facts["node_tier"],
            registry=Registry(**{k: reg[k] for k in ("address", "ca", "cert_dir", "username", "password")})
            if reg else None,
            standin_apt_url=facts.get("standin_apt_url", ""),
            overlay=facts.get("overlay", ""), overlay_hosts=facts.get("overlay_hosts", ""),
        )
        # the lab's own number, never "auto": the lab's scripts (repo.sh, registry.sh) compute ports from it
        lab.env = dict(os.environ, KUBECONFIG=str(lab.kubeconfig),
                       SMSHARE_LAB_INSTANCE=str(facts.get("instance", os.environ.get("SMSHARE_LAB_INSTANCE", "0"))),
                       ANSIBLE_VAULT_PASSWORD_FILE=str(lab.vault_password_file),
                       PATH=f"{REPO / 'lab' / 'bin'}:{lab.state_dir / 'bin'}:{os.environ.get('PATH', '')}")
        return lab

    @property
    def kubectl_path(self):
        return self.bin_dir / "kubectl"

    def kubectl(self, *args, check=True, input_text=None):
        return subprocess.run([str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
                              env=self.env, text=True, capture_output=True, check=check, input=input_text)

    def labctl(self, *args, check=False):
        return subprocess.run([sys.executable, str(LABCTL), *args], env=self.env, text=True,
                              capture_output=True, check=check)

    def _playbook_argv(self, playbook, args, extra_vars, inventory):
        argv = ["ansible-playbook", str(playbook)]
        for inv in inventory or self.inventory:
            argv += ["-i", inv]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        return argv + list(args)

    def playbook(self, playbook, *args, extra_vars=None, check=False, inventory=None, env=None):
        """ansible-playbook against the lab inventory (or `inventory`, a list of -i sources),
        with `env` over the lab's environment; returns the CompletedProcess."""
        return subprocess.run(self._playbook_argv(playbook, args, extra_vars, inventory),
                              env=dict(self.env, **(env or {})), text=True, capture_output=True, check=check,
                              cwd=REPO)

    def start_playbook(self, playbook, *args, extra_vars=None, inventory=None):
        """The same, started: a Popen in a session of its own, output (stdout and stderr) on .stdout."""
        return subprocess.Popen(self._playbook_argv(playbook, args, extra_vars, inventory), env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)

    def kill_api_server(self):
        """SIGKILL the lab's kube-apiserver (a lost API server); bring_back() brings it back."""
        pid = int((self.state_dir / "run" / "kube-apiserver.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)

    def bring_back(self):
        """`labctl up` keeping what runs (its GPU nodes, fleet, node tier): starts what is down
        (a killed API server, a stopped GPU node) and writes the GPU nodes' addresses again
        (a container stopped and started may get another one)."""
        proc = self.labctl("up", "--gpu-nodes", str(len(self.gpu_nodes)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        self.kubectl("get", "--raw", "/readyz")

    def load_image(self, ref):
        """Import a podman image into the node tier's containerd (for pods)."""
        self.labctl("load-image", ref, check=True)


SESSIONS = STATE / "sessions"


def other_sessions():
    """PIDs of other live pytest sessions using the lab (several engineers, one machine)."""
    found = []
    for lease in SESSIONS.glob("*") if SESSIONS.is_dir() else []:
        pid = int(lease.name) if lease.name.isdigit() else 0
        if pid == os.getpid():
            continue
        if pid and Path(f"/proc/{pid}").exists():
            found.append(pid)
        else:
            lease.unlink(missing_ok=True)
    return found


def _labctl(*args):
    proc = subprocess.run([sys.executable, str(LABCTL), *args], text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    sys.stdout.write(proc.stdout)
    return proc


def _keeping(args, facts):
    """`labctl up` arguments that keep the running lab's GPU nodes (its lab.json facts);
    labctl itself keeps the fleet and the node tier it runs."""
    args = list(args)
    wanted = int(args[args.index("--gpu-nodes") + 1]) if "--gpu-nodes" in args else \
        int(os.environ.get("SMSHARE_LAB_GPU_NODES", "2"))
    running = len(facts.get("gpu_nodes") or [])
    if running > wanted:
        if "--gpu-nodes" in args:
            args[args.index("--gpu-nodes") + 1] = str(running)
        else:
            args += ["--gpu-nodes", str(running)]
    return args


@pytest.fixture
def unreachable_kubeconfig(tmp_path):
    """A kubeconfig that loads and points at a port nothing listens on (127.0.0.1:1)."""
    path = tmp_path / "unreachable-kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
        "users": [{"name": "x", "user": {"token": "t"}}]}))
    return path


@pytest.fixture(scope="session")
def lab(request):
    """The lab, up for the whole session (cold: builds Kubernetes first, minutes)."""
    args = ["up"]
    # The selected tests (after -m/-k): does any of them need real pods?
    needs_nodes = any(item.get_closest_marker("lab_nodes") for item in request.session.items)
    if needs_nodes or os.environ.get("SMSHARE_LAB_NODES", "") in ("1", "true", "yes"):
        args.append("--nodes")
    # The fleet tests need more GPU nodes than the default two.
    fleet = [m.args[0] for item in request.session.items for m in item.iter_markers("lab_fleet") if m.args]
    if fleet:
        args.append("--fleet")
    if fleet and max(fleet) > int(os.environ.get("SMSHARE_LAB_GPU_NODES", "2")):
        args += ["--gpu-nodes", str(max(fleet))]
    was_up = (STATE / "lab.json").is_file() and _labctl("status").returncode == 0
    # Another live session shares this lab: never take away what it uses (a
    # `labctl up` with fewer GPU nodes removes the surplus ones).
    if was_up and other_sessions():
        args = _keeping(args, json.loads((STATE / "lab.json").read_text()))
    # A cold start builds Kubernetes for minutes: let its progress reach the terminal.
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        sys.stdout.write(f"\n[lab fixture] lab/labctl {' '.join(args)}\n")
        sys.stdout.flush()
        proc = subprocess.run([sys.executable, str(LABCTL), *args], check=False)
    if proc.returncode != 0:
        pytest.fail(f"lab/labctl {' '.join(args)} failed (rc={proc.returncode}); its output is above")
    SESSIONS.mkdir(parents=True, exist_ok=True)
    lease = SESSIONS / str(os.getpid())
    lease.touch()
    facts = json.loads((STATE / "lab.json").read_text())
    yield Lab.from_facts(facts)
    lease.unlink(missing_ok=True)
    keep = os.environ.get("SMSHARE_LAB_KEEP", "") in ("1", "true", "yes")
    if not was_up and not keep and not other_sessions():
        down = _labctl("down")
        assert down.returncode == 0, down.stdout

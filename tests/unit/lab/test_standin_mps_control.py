# Apache-2.0
"""The lab's stand-in nvidia-cuda-mps-control (lab/standin/bin), run as a real
daemon in a short temporary pipe folder: the MPS v3 verbs as the fork's mpsd
sends them (kai-scheduler/gpu-fractioning mpsctl/control.go), their output
shapes, every refusal, the 83-character pipe directory limit, the help that
needs no daemon, the lab's client protocol (attach, stay attached, terminate)
and the mps.ignore-cap flag. lab/standin/CONTRACT.md names each behaviour's
source."""
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MPS = REPO / "lab" / "standin" / "bin" / "nvidia-cuda-mps-control"
GPUVIEW = REPO / "lab" / "standin" / "testimage" / "gpuview.py"
# the TOML the fork's mpsd writes (kai-scheduler/kai-gpu-fractioning config.go)
FORK_TOML = ('[features.memacct]\nenabled=true\naudit_log=true\n\n[features.context-share]\nenabled=true\n'
             'default_socket="off"\n\n[servers.shared]\n')
UUID = "GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d"
OTHER_UID = 60000
# a python another uid can run (the venv's may live under /root)
OTHER_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


def load_mps_module():
    loader = importlib.machinery.SourceFileLoader("standin_mps_control", str(MPS))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class Mps:
    """One daemon's folders and a CLI to drive it."""

    def __init__(self, base, pipe_name="p"):
        self.base = base
        self.pipe = base / pipe_name
        self.log = base / "l"
        self.env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(self.pipe), CUDA_MPS_LOG_DIRECTORY=str(self.log))
        for key in ("NVIDIA_STANDIN_ROOT", "CUDA_MPS_PROTOCOL_VERSION", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                    "NVIDIA_STANDIN_MPS_TERMINATE_TIMEOUT"):
            self.env.pop(key, None)
        self.started = False

    def run(self, *args, stdin=None, uid=None, env=None, timeout=30):
        python, preexec = sys.executable, None
        if uid is not None:
            python = OTHER_PYTHON

            def preexec():
                os.setgid(uid)
                os.setuid(uid)
        return subprocess.run([python, str(MPS), *args], input=stdin, env=dict(self.env, **(env or {})),
                              capture_output=True, text=True, timeout=timeout, check=False, preexec_fn=preexec)

    def v3(self, *args, **kwargs):
        return self.run("-p", "3", *args, **kwargs)

    def start(self, *flags, config=FORK_TOML, env=None):
        argv = ["-d", "-p", "3", "-m", *flags]
        if config is not None:
            (self.base / "mps.toml").write_text(config)
            argv += ["-a", str(self.base / "mps.toml")]
        started = self.run(*argv, env=env)
        self.started = started.returncode == 0
        return started

    def stop(self):
        if self.started:
            self.run("-q")
            for _attempt in range(50):
                if not (self.pipe / "control").exists():
                    break
                time.sleep(0.1)
            self.started = False

    def control_log(self):
        path = self.log / "control.log"
        return path.read_text() if path.exists() else ""


@pytest.fixture
def mps():
    base = Path(tempfile.mkdtemp(prefix="smps", dir="/tmp"))
    os.chmod(base, 0o755)  # another uid must reach the sockets in multi-user mode
    daemon = Mps(base)
    yield daemon
    daemon.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def ready(mps):
    """As the fork's mpsd leaves it: server shared, default capped at 10, one
    container namespace created then capped at 50."""
    started = mps.start()
    assert started.returncode == 0, started.stderr
    for argv in (["namespace", "set", "default", "--server=shared", "--active-thread-percentage=10"],
                 ["namespace", "create", "kai_abc_0011", "--server=shared"],
                 ["namespace", "set", "kai_abc_0011", "--server=shared", "--active-thread-percentage=50"]):
        done = mps.v3(*argv)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), argv
    return mps


class Client:
    """A CUDA client by the lab's protocol, attached until closed."""

    def __init__(self, pipe_dir, requested="100", cmd="VLLM::EngineCore", device=UUID):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(os.path.join(str(pipe_dir), "control"))
        hello = {"client": {"requested": requested, "pid": os.getpid(), "cmd": cmd, "device": device}}
        self.sock.sendall(json.dumps(hello).encode() + b"\n")
        self.answer = json.loads(self.read_line())

    def read_line(self):
        data = b""
        while not data.endswith(b"\n"):
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.decode()

    @property
    def granted(self):
        return json.loads(self.answer["out"])["active_thread_percentage"]

    def close(self):
        self.sock.close()


def hold(pipe_dir, seconds=30, requested=None):
    """gpuview.py hold: a client process attached until it is asked to detach."""
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe_dir))
    env.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
    if requested:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = requested
    proc = subprocess.Popen([sys.executable, str(GPUVIEW), "hold", str(seconds)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)


# ---------------------------------------------------------------- the verbs
NS = "kai_abc_0011"
LIST = ("NAMESPACE                              ACTIVE_THREAD_PERCENTAGE  PINNED_DEVICE_MEM_LIMIT\n"
        "default                                10.00                     unlimited\n"
        "kai_abc_0011                           50.00                     unlimited\n")


def unrecognized(option, verb):
    return "Error: unrecognized option '%s' for 'namespace %s'\n" % (option, verb)


def bad_name(name):
    return "Error: invalid namespace name '%s': only lowercase letters, digits and underscores\n" % name


def listed(*rows):
    """The namespace list after a change: (name, percentage) rows."""
    out = "NAMESPACE                              ACTIVE_THREAD_PERCENTAGE  PINNED_DEVICE_MEM_LIMIT\n"
    return out + "".join("%s%s%s\n" % (n.ljust(39), p.ljust(26), "unlimited") for n, p in rows)


# id, argv after -p 3, rc, stdout ({pipe} filled in), stderr (exact, or a regex when re.Pattern),
# then (argv, stdout) checked afterwards, or None
VERB_CASES = [
    ("list", ["namespace", "list", "--server=shared"], 0, LIST, "", None),
    ("list-refuses-format", ["namespace", "list", "--server=shared", "--format=csv"], 1, "",
     unrecognized("--format=csv", "list"), None),
    ("list-unknown-server", ["namespace", "list", "--server=nope"], 1, "", "Error: server 'nope' not found\n", None),
    ("list-needs-server", ["namespace", "list"], 1, "", re.compile(r"^Error: missing option '--server'"), None),
    ("create", ["namespace", "create", "kai_new_2", "--server=shared"], 0, "", "",
     (["namespace", "list", "--server=shared"],
      listed(("default", "10.00"), (NS, "50.00"), ("kai_new_2", "100.00")))),
    ("create-exists", ["namespace", "create", NS, "--server=shared"], 1, "",
     "Error: namespace 'kai_abc_0011' already exists on server 'shared'\n", None),
    ("create-default-exists", ["namespace", "create", "default", "--server=shared"], 1, "",
     "Error: namespace 'default' already exists on server 'shared'\n", None),
    ("create-refuses-old-name-option", ["namespace", "create", "--server=shared", "--name=kai_x"], 1, "",
     unrecognized("--name=kai_x", "create"), (["namespace", "list", "--server=shared"], LIST)),
    ("create-refuses-percentage", ["namespace", "create", "kai_x", "--server=shared",
                                   "--active-thread-percentage=50"], 1, "",
     unrecognized("--active-thread-percentage=50", "create"), None),
    ("create-refuses-pinned-memory", ["namespace", "create", "kai_x", "--server=shared",
                                      "--pinned-memory-limit=40960M"], 1, "",
     unrecognized("--pinned-memory-limit=40960M", "create"), None),
    ("create-hyphen", ["namespace", "create", "pod-uid-1", "--server=shared"], 1, "", bad_name("pod-uid-1"), None),
    ("create-uppercase", ["namespace", "create", "KAI_ABC", "--server=shared"], 1, "", bad_name("KAI_ABC"), None),
    ("create-dot", ["namespace", "create", "kai.abc", "--server=shared"], 1, "", bad_name("kai.abc"), None),
    ("create-unknown-server", ["namespace", "create", "kai_x", "--server=nope"], 1, "",
     "Error: server 'nope' not found\n", None),
    ("create-needs-name", ["namespace", "create", "--server=shared"], 1, "", re.compile(r"^Error: .*needs NAME"),
     None),
    ("create-needs-server", ["namespace", "create", "kai_x"], 1, "", re.compile(r"^Error: missing option '--server'"),
     None),
    ("create-extra-argument", ["namespace", "create", "kai_x", "kai_y", "--server=shared"], 1, "",
     "Error: unexpected argument 'kai_y' for 'namespace create'\n", None),
    ("set", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=25"], 0, "", "",
     (["namespace", "list", "--server=shared"], listed(("default", "10.00"), (NS, "25.00")))),
    ("set-zero-is-unlimited", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=0"], 0, "", "",
     (["namespace", "list", "--server=shared"], listed(("default", "10.00"), (NS, "100.00")))),
    ("set-decimal", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=12.5"], 0, "", "",
     (["namespace", "list", "--server=shared"], listed(("default", "10.00"), (NS, "12.50")))),
    ("set-hundred", ["namespace", "set", "default", "--server=shared", "--active-thread-percentage=100"], 0, "", "",
     (["namespace", "list", "--server=shared"], listed(("default", "100.00"), (NS, "50.00")))),
    ("set-over-100", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=101"], 1, "",
     re.compile(r"^Error: invalid active thread percentage '101'"), (["namespace", "list", "--server=shared"], LIST)),
    ("set-negative", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=-1"], 1, "",
     re.compile(r"^Error: invalid active thread percentage '-1'"), None),
    ("set-below-one", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=0.5"], 1, "",
     re.compile(r"^Error: invalid active thread percentage '0.5'"), None),
    ("set-not-a-number", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=half"], 1, "",
     re.compile(r"^Error: invalid active thread percentage 'half'"), None),
    ("set-needs-percentage", ["namespace", "set", NS, "--server=shared"], 1, "",
     re.compile(r"^Error: missing option '--active-thread-percentage'"), None),
    ("set-refuses-pinned-memory", ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=5",
                                   "--pinned-memory-limit=1G"], 1, "",
     unrecognized("--pinned-memory-limit=1G", "set"), (["namespace", "list", "--server=shared"], LIST)),
    ("set-refuses-old-name-option", ["namespace", "set", "--server=shared", "--name=kai_abc_0011",
                                     "--active-thread-percentage=5"], 1, "",
     unrecognized("--name=kai_abc_0011", "set"), None),
    ("set-bad-name", ["namespace", "set", "Kai", "--server=shared", "--active-thread-percentage=5"], 1, "",
     bad_name("Kai"), None),
    ("set-missing-namespace", ["namespace", "set", "kai_nope", "--server=shared", "--active-thread-percentage=5"], 1,
     "", "Error: namespace 'kai_nope' does not exist on server 'shared'\n", None),
    ("set-unknown-server", ["namespace", "set", NS, "--server=nope", "--active-thread-percentage=5"], 1, "",
     "Error: server 'nope' not found\n", None),
    ("delete", ["namespace", "delete", NS, "--server=shared"], 0, "", "",
     (["namespace", "get", NS, "shared", "pipe_directory"], "Error: namespace 'kai_abc_0011' does not exist\n")),
    ("delete-default", ["namespace", "delete", "default", "--server=shared"], 1, "",
     re.compile(r"^Error: the default namespace .*cannot be deleted"), (["namespace", "list", "--server=shared"], LIST)),
    ("delete-missing", ["namespace", "delete", "kai_nope", "--server=shared"], 1, "",
     "Error: namespace 'kai_nope' does not exist on server 'shared'\n", None),
    ("delete-bad-name", ["namespace", "delete", "kai-abc", "--server=shared"], 1, "", bad_name("kai-abc"), None),
    ("delete-refuses-old-name-option", ["namespace", "delete", "--server=shared", "--name=kai_abc_0011"], 1, "",
     unrecognized("--name=kai_abc_0011", "delete"), None),
    ("get", ["namespace", "get", NS, "shared", "pipe_directory"], 0, "{pipe}/shared/kai_abc_0011\n", "", None),
    ("get-default", ["namespace", "get", "default", "shared", "pipe_directory"], 0, "{pipe}/shared/default\n", "",
     None),
    ("get-missing-answers-0", ["namespace", "get", "kai_nope", "shared", "pipe_directory"], 0,
     "Error: namespace 'kai_nope' does not exist\n", "", None),
    ("get-unknown-field", ["namespace", "get", NS, "shared", "pipe-directory"], 1, "",
     re.compile(r"^Error: unknown field 'pipe-directory'"), None),
    ("get-unknown-server", ["namespace", "get", NS, "nope", "pipe_directory"], 1, "",
     "Error: server 'nope' not found\n", None),
    ("get-server-is-positional", ["namespace", "get", NS, "--server=shared", "pipe_directory"], 1, "",
     unrecognized("--server=shared", "get"), None),
    ("get-needs-field", ["namespace", "get", NS, "shared"], 1, "", re.compile(r"^Error: .*needs FIELD"), None),
    ("get-bad-name", ["namespace", "get", "kai/abc", "shared", "pipe_directory"], 1, "", bad_name("kai/abc"), None),
    ("client-list-no-clients", ["client", "list"], 0,
     "PID     SERVER        DEVICE                                         MAWS NS                   CMD\n", "", None),
    ("client-list-csv-no-clients", ["client", "list", "--format=csv"], 0, "PID,SERVER,DEVICE,MAWS NS,CMD\n", "",
     None),
    ("client-list-csv-noheader-no-clients", ["client", "list", "--format=csv,noheader"], 0, "", "", None),
    ("client-list-bad-format", ["client", "list", "--format=json"], 1, "",
     re.compile(r"^Error: invalid format 'json'"), None),
    ("client-list-unknown-option", ["client", "list", "--server=shared"], 1, "",
     "Error: unrecognized option '--server=shared' for 'client list'\n", None),
    ("client-terminate-unknown", ["client", "terminate", "4194304"], 1, "",
     "Error: no MPS client with PID 4194304\n", None),
    ("client-terminate-not-a-pid", ["client", "terminate", "abc"], 1, "", "Error: invalid PID 'abc'\n", None),
    ("client-terminate-needs-pid", ["client", "terminate"], 1, "", re.compile(r"^Error: .*needs PID"), None),
    ("unknown-verb", ["namespace", "rename", NS, "--server=shared"], 1, "",
     "Error: unknown command 'namespace rename'\n", None),
    ("unknown-module", ["server", "list"], 1, "", "Error: unknown command 'server list'\n", None),
    ("module-without-verb", ["namespace"], 1, "", re.compile(r"^Error: 'namespace' needs a verb"), None),
]


def check_answer(proc, rc, out, err, pipe):
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    assert proc.stdout == out.replace("{pipe}", str(pipe))
    if isinstance(err, re.Pattern):
        assert err.search(proc.stderr), proc.stderr
    else:
        assert proc.stderr == err


@pytest.mark.parametrize("argv,rc,out,err,after", [c[1:] for c in VERB_CASES], ids=[c[0] for c in VERB_CASES])
def test_verb(ready, argv, rc, out, err, after):
    check_answer(ready.v3(*argv), rc, out, err, ready.pipe)
    if after:
        then = ready.v3(*after[0])
        assert (then.returncode, then.stdout) == (0, after[1].replace("{pipe}", str(ready.pipe)))


def test_a_v3_verb_needs_protocol_3(ready):
    proc = ready.run("namespace", "list", "--server=shared")
    assert proc.returncode == 1
    assert "is not a command of protocol 2: MPS v3 commands need -p 3" in proc.stderr
    assert ready.run("namespace", "list", "--server=shared",
                     env={"CUDA_MPS_PROTOCOL_VERSION": "3"}).stdout == LIST


def test_syntax_is_refused_without_a_daemon(mps):
    proc = mps.v3("namespace", "create", "--server=shared", "--name=kai_x")
    assert (proc.returncode, proc.stderr) == (1, unrecognized("--name=kai_x", "create"))
    proc = mps.v3("namespace", "list", "--server=shared")
    assert (proc.returncode, proc.stdout) == (1, "Cannot find MPS control daemon process\n")


def test_namespace_sockets_follow_the_namespaces(ready):
    assert (ready.pipe / "control").is_socket()
    assert (ready.pipe / "shared" / "default" / "control").is_socket()
    assert (ready.pipe / "shared" / NS / "control").is_socket()
    assert ready.v3("namespace", "delete", NS, "--server=shared").returncode == 0
    assert not (ready.pipe / "shared" / NS).exists()
    assert ready.v3("namespace", "create", NS, "--server=shared").returncode == 0
    assert (ready.pipe / "shared" / NS / "control").is_socket()
    ready.stop()
    assert not (ready.pipe / "shared").exists() and not (ready.pipe / "control").exists()


def test_the_log_lines(ready):
    log = ready.control_log()
    assert "Adding server 'shared' [multiuser enabled]" in log
    assert "Namespace 'default' on server 'shared': active thread percentage 100" in log  # at start
    assert "Namespace 'default' on server 'shared': active thread percentage 10" in log   # mpsd's set
    assert "Namespace 'kai_abc_0011' created on server 'shared'" in log
    assert "Namespace 'kai_abc_0011' on server 'shared': active thread percentage 50" in log


def test_foreground_echoes_the_log(mps):
    (mps.base / "mps.toml").write_text(FORK_TOML)
    proc = subprocess.Popen([sys.executable, str(MPS), "-f", "-p", "3", "-m", "-a", str(mps.base / "mps.toml")],
                            env=mps.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _attempt in range(100):
            if (mps.pipe / "control").exists():
                break
            time.sleep(0.05)
        assert mps.run("-q").returncode == 0
        out, _err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "Adding server 'shared' [multiuser enabled]" in out and "Starting control daemon" in out


# ---------------------------------------------------------------- the config
CONFIG_CASES = [
    ("fork-toml", FORK_TOML, 0, listed(("default", "100.00"))),
    ("server-percentage-and-namespaces",
     'schema_version = "1.0"\n[servers.shared]\nuid = 0\nactive_thread_percentage = 60\n'
     '[servers.shared.namespaces.default]\nactive_thread_percentage = "10"\n'
     '[servers.shared.namespaces.pod_a]\nactive_thread_percentage = 50\n'
     '[servers.shared.namespaces.pod_b]\n', 0,
     listed(("default", "10.00"), ("pod_a", "50.00"), ("pod_b", "60.00"))),
    ("bad-namespace-name", '[servers.shared]\n[servers.shared.namespaces.pod-a]\nactive_thread_percentage = 50\n', 1,
     re.compile(r"^Failed to apply configuration .*invalid namespace name")),
    ("bad-percentage", '[servers.shared]\nactive_thread_percentage = 150\n', 1,
     re.compile(r"^Failed to apply configuration .*active_thread_percentage: invalid value 150")),
    ("not-toml", '[servers.shared\n', 1, re.compile(r"^Failed to apply configuration")),
]


@pytest.mark.parametrize("config,rc,expected", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_config(mps, config, rc, expected):
    started = mps.start(config=config)
    assert started.returncode == rc, started.stderr
    if rc == 0:
        assert mps.v3("namespace", "list", "--server=shared").stdout == expected
    else:
        assert expected.search(started.stderr), started.stderr


def test_namespace_index_follows_the_creation_order(mps):
    config = ('[servers.shared]\n[servers.shared.namespaces.pod_a]\nactive_thread_percentage = 50\n')
    assert mps.start(config=config).returncode == 0
    assert mps.v3("namespace", "create", "kai_later", "--server=shared").returncode == 0
    clients = [Client(mps.pipe / "shared" / name) for name in ("default", "pod_a", "kai_later")]
    rows = mps.v3("client", "list", "--format=csv,noheader").stdout.splitlines()
    assert [row.split(",")[3] for row in rows] == ["shared/default (0)", "shared/pod_a (1)", "shared/kai_later (2)"]
    for client in clients:
        client.close()


# ---------------------------------------------------------------- pipe directory length
def test_a_long_pipe_directory_fails_the_start_with_no_log(mps):
    long_pipe = Mps(mps.base, pipe_name="x" * (83 - len(str(mps.base)) - 1 + 1))
    assert len(str(long_pipe.pipe)) == 84
    started = long_pipe.start(config=None)
    assert (started.returncode, started.stdout, started.stderr) == (1, "", "Failed to initialize MPS control daemon\n")
    assert not long_pipe.log.exists() and not long_pipe.pipe.exists()


def test_83_characters_still_start(mps):
    edge = Mps(mps.base, pipe_name="x" * (83 - len(str(mps.base)) - 1))
    assert len(str(edge.pipe)) == 83
    try:
        started = edge.start(config=None)
        assert started.returncode == 0, started.stderr
    finally:
        edge.stop()


def test_a_config_namespace_over_the_limit_fails_the_start(mps):
    # the pipe folder itself fits, its <server>/default folder does not
    long_pipe = Mps(mps.base, pipe_name="x" * (80 - len(str(mps.base)) - 1))
    started = long_pipe.start()
    assert (started.returncode, started.stderr) == (1, "Failed to initialize MPS control daemon\n")
    assert not long_pipe.log.exists()


def test_a_namespace_over_the_limit_is_not_created(mps):
    room = 83 - len(str(mps.pipe / "shared")) - 1  # the longest name that fits
    assert mps.start().returncode == 0
    name = "k" * (room + 1)
    made = mps.v3("namespace", "create", name, "--server=shared")
    assert (made.returncode, made.stderr) == (1, "Failed to initialize MPS namespace '%s'\n" % name)
    assert name not in mps.control_log()
    assert name not in mps.v3("namespace", "list", "--server=shared").stdout
    assert mps.v3("namespace", "create", "k" * room, "--server=shared").returncode == 0


# ---------------------------------------------------------------- help
def test_namespace_help_needs_no_daemon(mps):
    for flag in ("--help", "-h"):
        proc = mps.v3("namespace", flag)
        assert proc.returncode == 0, proc.stderr
        verbs = [m.group(1) for m in re.finditer(r"^  (create|delete|get|list|set) +\S", proc.stdout, re.M)]
        assert verbs == ["create", "delete", "get", "list", "set"]
    verb_help = mps.v3("namespace", "create", "--help")
    assert verb_help.returncode == 0 and "namespace create NAME --server=SERVER" in verb_help.stdout
    assert mps.v3("client", "--help").returncode == 0
    assert not mps.log.exists()


def test_namespace_help_needs_a_driver_with_mps_v3(mps, tmp_path):
    (tmp_path / "usr/share/nvidia-standin").mkdir(parents=True)
    (tmp_path / "usr/share/nvidia-standin/driver.json").write_text(json.dumps({"branch": 580}))
    proc = mps.run("-p", "3", "namespace", "--help", env={"NVIDIA_STANDIN_ROOT": str(tmp_path)})
    assert proc.returncode == 1 and proc.stderr.startswith("Unknown option: -p\n")
    proc = mps.run("namespace", "--help")  # no protocol 3: refused as every v3 verb
    assert proc.returncode == 1 and "need -p 3" in proc.stderr


# ---------------------------------------------------------------- privileges
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not OTHER_PYTHON, reason="needs root to run as another uid")


@needs_root
@pytest.mark.parametrize("argv", [["namespace", "create", "kai_mine", "--server=shared"],
                                  ["namespace", "set", NS, "--server=shared", "--active-thread-percentage=100"],
                                  ["namespace", "delete", NS, "--server=shared"]], ids=["create", "set", "delete"])
def test_a_non_owner_cannot_change_namespaces(ready, argv):
    proc = ready.v3(*argv, uid=OTHER_UID)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "Insufficient privileges for UID %d. 'NAMESPACE %s' requires server owner.\n" % (
        OTHER_UID, argv[1].upper())
    assert ready.v3("namespace", "list", "--server=shared").stdout == LIST


@needs_root
def test_a_non_owner_may_read(ready):
    assert ready.v3("namespace", "list", "--server=shared", uid=OTHER_UID).stdout == LIST
    proc = ready.v3("namespace", "get", NS, "shared", "pipe_directory", uid=OTHER_UID)
    assert proc.stdout == "%s/shared/%s\n" % (ready.pipe, NS)


@needs_root
def test_the_server_owner_may_change_namespaces(mps):
    assert mps.start(config="[servers.shared]\nuid = %d\n" % OTHER_UID).returncode == 0
    for argv in (["namespace", "create", "kai_mine", "--server=shared"],
                 ["namespace", "set", "kai_mine", "--server=shared", "--active-thread-percentage=30"],
                 ["namespace", "delete", "kai_mine", "--server=shared"]):
        proc = mps.v3(*argv, uid=OTHER_UID)
        assert proc.returncode == 0, proc.stderr


@needs_root
def test_without_multiuser_another_uid_cannot_connect(mps):
    (mps.base / "mps.toml").write_text(FORK_TOML)
    assert mps.run("-d", "-p", "3", "-a", str(mps.base / "mps.toml")).returncode == 0
    mps.started = True
    proc = mps.v3("namespace", "list", "--server=shared", uid=OTHER_UID)
    assert proc.returncode == 1 and "Permission denied" in proc.stderr


# ---------------------------------------------------------------- clients
def test_a_client_gets_at_most_its_namespaces_cap(ready):
    clients = {"asks-100": Client(ready.pipe / "shared" / NS),
               "asks-25": Client(ready.pipe / "shared" / NS, requested="25"),
               "asks-garbage": Client(ready.pipe / "shared" / NS, requested="lots"),
               "root-socket-is-default": Client(ready.pipe),
               "default": Client(ready.pipe / "shared" / "default", requested="50")}
    granted = {name: c.granted for name, c in clients.items()}
    assert granted == {"asks-100": 50, "asks-25": 25, "asks-garbage": 50, "root-socket-is-default": 10,
                       "default": 10}
    assert all(c.answer["rc"] == 0 and c.answer["err"] == "" for c in clients.values())
    assert clients["asks-100"].answer["out"] == '{"active_thread_percentage": 50.0}\n'
    for client in clients.values():
        client.close()


def test_the_ignore_cap_flag_grants_everything(ready):
    (ready.pipe / "standin-ignore-cap").touch()
    client = Client(ready.pipe / "shared" / NS, requested="50")
    assert client.granted == 100
    client.close()
    listed_now = ready.v3("namespace", "list", "--server=shared").stdout
    assert listed_now == LIST  # the configured caps are still shown


def test_protocol_2_clients_get_the_default_percentage(mps):
    assert mps.run("-d").returncode == 0
    mps.started = True
    assert mps.run(stdin="set_default_active_thread_percentage 40\n").stdout == ""
    client = Client(mps.pipe, requested="100")
    assert client.granted == 40
    servers = mps.run(stdin="get_server_list\n").stdout.split()
    assert len(servers) == 1
    assert mps.run(stdin="get_client_list %s\n" % servers[0]).stdout == "%d\n" % os.getpid()
    client.close()


def test_client_list_formats(ready):
    client = Client(ready.pipe / "shared" / NS)
    pid = os.getpid()
    csv = ready.v3("client", "list", "--format=csv,noheader")
    assert csv.stdout == "%d,shared,%s,shared/kai_abc_0011 (1),VLLM::EngineCore\n" % (pid, UUID)
    with_header = ready.v3("client", "list", "--format=csv").stdout
    assert with_header == "PID,SERVER,DEVICE,MAWS NS,CMD\n" + csv.stdout
    table = ready.v3("client", "list").stdout.splitlines()
    assert table[0] == "PID     SERVER        DEVICE                                         MAWS NS                   CMD"
    assert table[1].split(None, 1)[0] == (str(pid) if len(str(pid)) <= 6 else str(pid)[:3] + "...")
    assert table[1][8:].split("  ")[0] == "shared"
    assert ready.v3("client", "list", "--format=table,noheader").stdout.splitlines() == table[1:]
    client.close()
    for _attempt in range(50):
        if ready.v3("client", "list", "--format=csv,noheader").stdout == "":
            break
        time.sleep(0.05)
    assert ready.v3("client", "list", "--format=csv,noheader").stdout == ""


def test_the_table_truncates_long_pids_as_recorded():
    """The rows recorded on driver 615 (gpu-fractioning control_test.go)."""
    module = load_mps_module()
    rows = [("3167082", "srv", UUID, "srv/default (0)", "VLLM::EngineCore"),
            ("3165259", "srv", UUID, "srv/default (0)", "VLLM::EngineCore")]
    recorded = ("PID     SERVER        DEVICE                                         MAWS NS                   CMD\n"
                "316...  srv           GPU-cc97390c-c189-71f5-1bb7-5b0af481fa0d       srv/default (0)           "
                "VLLM::EngineCore\n") * 1
    table = module.client_table(rows, "")
    assert table == recorded + recorded.splitlines(True)[1]
    assert module.client_table(rows, "csv,noheader") == (
        "3167082,srv,%s,srv/default (0),VLLM::EngineCore\n3165259,srv,%s,srv/default (0),VLLM::EngineCore\n"
        % (UUID, UUID))
    assert module.client_table([("123456",) + rows[0][1:]], "table,noheader").startswith("123456  srv")


@pytest.mark.parametrize("verb", [["set", NS, "--server=shared", "--active-thread-percentage=20"],
                                  ["delete", NS, "--server=shared"]], ids=["set", "delete"])
def test_a_namespace_with_an_attached_client_is_busy(ready, verb):
    proc, hello = hold(ready.pipe / "shared" / NS)
    try:
        assert hello["active_thread_percentage"] == 50
        busy = ready.v3("namespace", *verb)
        assert (busy.returncode, busy.stderr) == (
            1, "Error: namespace 'kai_abc_0011' on server 'shared' has 1 attached client(s)\n")
        assert ready.v3("namespace", "list", "--server=shared").stdout == LIST
        # the default namespace is not busy
        assert ready.v3("namespace", "set", "default", "--server=shared",
                        "--active-thread-percentage=20").returncode == 0
    finally:
        proc.kill()
        proc.wait()
    for _attempt in range(50):
        done = ready.v3("namespace", *verb)
        if done.returncode == 0:
            break
        time.sleep(0.05)
    assert done.returncode == 0, done.stderr


def test_client_terminate_waits_until_the_client_detached(ready):
    proc, hello = hold(ready.pipe / "shared" / NS, seconds=60)
    try:
        row = ready.v3("client", "list", "--format=csv,noheader").stdout
        assert row == "%d,shared,,shared/kai_abc_0011 (1),gpuview\n" % hello["pid"]
        started = time.monotonic()
        done = ready.v3("client", "terminate", str(hello["pid"]))
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        assert proc.wait(timeout=10) == 0  # the helper left when asked to
        assert time.monotonic() - started < 5
        assert ready.v3("client", "list", "--format=csv,noheader").stdout == ""
        assert ready.v3("namespace", "delete", NS, "--server=shared").returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_client_terminate_cuts_off_a_client_that_stays(mps):
    assert mps.start(env={"NVIDIA_STANDIN_MPS_TERMINATE_TIMEOUT": "2"}).returncode == 0
    client = Client(mps.pipe / "shared" / "default")  # reads nothing: it never detaches by itself
    answers = {}
    waiting = threading.Thread(target=lambda: answers.update(
        terminate=mps.v3("client", "terminate", str(os.getpid()))))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.3)
    # the daemon serves other commands while the terminate waits
    during = mps.v3("namespace", "list", "--server=shared")
    assert during.returncode == 0 and time.monotonic() - started < 1.8
    waiting.join(timeout=15)
    assert answers["terminate"].returncode == 0
    assert time.monotonic() - started >= 2
    assert json.loads(client.read_line()) == {"terminate": True}
    assert client.read_line() == ""  # the server closed the connection
    assert mps.v3("client", "list", "--format=csv,noheader").stdout == ""
    client.close()


def test_quit_detaches_the_clients(ready):
    client = Client(ready.pipe / "shared" / NS)
    ready.stop()
    assert client.read_line() == ""
    client.close()

"""module_utils/cluster_access.py: one way for the collection's modules to load cluster access."""
import signal
import socket
import threading
import time

import pytest
import yaml

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access as ca


def kubeconfig(path, contexts=("lab",), server="https://127.0.0.1:6443"):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u"}} for name in contexts],
        "current-context": contexts[0]}))
    return str(path)


@pytest.fixture(autouse=True)
def no_default_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_the_given_kubeconfig_and_context_choose_the_server(tmp_path):
    path = kubeconfig(tmp_path / "kc", contexts=("lab", "other"))
    assert ca.api_client(path, "other").configuration.host == "https://127.0.0.1:6443"


def test_KUBECONFIG_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kc", server="https://10.0.0.1:6443"))
    assert ca.api_client().configuration.host == "https://10.0.0.1:6443"


def test_a_default_kubeconfig_that_does_not_load_is_named_by_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "from-env"))
    with pytest.raises(ca.AccessError, match=r"^cannot load kubeconfig .*/from-env: "):
        ca.api_client()


@pytest.mark.parametrize("context, expected", [
    (None, r"^cannot load kubeconfig .*/missing: "),
    ("lab", r"^cannot load kubeconfig .*/missing \(context lab\): "),
])
def test_a_kubeconfig_that_does_not_load_is_named(tmp_path, context, expected):
    with pytest.raises(ca.AccessError, match=expected):
        ca.api_client(str(tmp_path / "missing"), context)


def test_a_context_the_kubeconfig_lacks_is_named(tmp_path):
    with pytest.raises(ca.AccessError, match=r"\(context nope\).*nope"):
        ca.api_client(kubeconfig(tmp_path / "kc"), "nope")


def test_no_kubeconfig_outside_a_pod_says_so():
    with pytest.raises(ca.AccessError, match="^no kubeconfig and not in a cluster"):
        ca.api_client()


def test_the_options_match_kubernetes_core_so_one_module_defaults_entry_serves_both():
    assert ca.ARGUMENT_SPEC == {"kubeconfig": {"type": "path"}, "context": {"type": "str"}}


class FakeExec:
    """The kubernetes library's WSClient as exec_in_pod uses it: a command that
    ends within `runs` seconds, or keeps running."""

    def __init__(self, runs, stdout="out", stderr="", returncode=0):
        self.runs, self.stdout, self.stderr, self._rc = runs, stdout, stderr, returncode
        self.open, self.closed, self.waited = True, False, None

    def run_forever(self, timeout):
        self.waited = timeout
        if self.runs <= timeout:
            self.open = False

    def is_open(self):
        return self.open

    def read_stdout(self, timeout=None):
        assert timeout == 0, "a read after the command must never wait"
        return self.stdout

    def read_stderr(self, timeout=None):
        assert timeout == 0, "a read after the command must never wait"
        return self.stderr

    @property
    def returncode(self):
        return None if self.open else self._rc

    def close(self):
        self.closed = True


@pytest.fixture
def fake_stream(monkeypatch):
    calls = []

    def install(resp):
        def stream(func, pod, namespace, **kwargs):
            calls.append((func, pod, namespace, kwargs))
            if isinstance(resp, Exception):
                raise resp
            return resp
        monkeypatch.setattr(ca, "kube_stream", stream)
        return calls
    return install


class Core:
    connect_get_namespaced_pod_exec = "connect"


def test_exec_returns_the_output_and_return_code_and_closes(fake_stream):
    resp = FakeExec(runs=1, stdout="hello\n", stderr="warn\n", returncode=3)
    calls = fake_stream(resp)
    assert ca.exec_in_pod(Core(), "ns", "pod", ["echo", "hello"], "main", timeout=7) == ("hello\n", "warn\n", 3)
    assert resp.closed and resp.waited == 7
    func, pod, namespace, kwargs = calls[0]
    assert (func, pod, namespace) == ("connect", "pod", "ns")
    assert kwargs["command"] == ["echo", "hello"] and kwargs["container"] == "main"
    assert kwargs["_request_timeout"] == 7 and not kwargs["stdin"] and not kwargs["tty"]


def test_exec_without_a_container_leaves_the_choice_to_the_api_server(fake_stream):
    calls = fake_stream(FakeExec(runs=0))
    ca.exec_in_pod(Core(), "ns", "pod", ["true"])
    assert "container" not in calls[0][3] and calls[0][3]["_request_timeout"] == ca.REQUEST_TIMEOUT


def test_a_command_still_running_at_the_timeout_is_an_error_with_its_output_and_the_stream_is_closed(fake_stream):
    resp = FakeExec(runs=600, stdout="partial\n", stderr="warming up\n")
    fake_stream(resp)
    with pytest.raises(ca.ExecTimeout, match=r"^still running after 5 s$") as caught:
        ca.exec_in_pod(Core(), "ns", "pod", ["sleep", "600"], timeout=5)
    assert resp.closed
    assert (caught.value.started, caught.value.stdout, caught.value.stderr) == (True, "partial\n", "warming up\n")


def test_a_server_that_accepts_the_exec_and_never_answers_is_left_at_the_timeout(tmp_path):
    """The real client against a socket that accepts and stays silent: the
    websocket connects without a timeout of its own, so the deadline is ours."""
    from kubernetes import client as kube_client

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    accepted = []
    threading.Thread(target=lambda: accepted.append(silent.accept()), daemon=True).start()
    path = kubeconfig(tmp_path / "kc", server="https://127.0.0.1:%d" % silent.getsockname()[1])
    core = kube_client.CoreV1Api(ca.api_client(path))
    started = time.monotonic()
    try:
        with pytest.raises(ca.ExecTimeout, match=r"^no answer to the exec within 1 s$") as caught:
            ca.exec_in_pod(core, "ns", "pod", ["true"], timeout=1)
    finally:
        silent.close()
    assert not caught.value.started
    assert time.monotonic() - started < 10
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler, None), \
        "the deadline puts the previous SIGALRM handler back"
    assert signal.alarm(0) == 0, "no alarm is left pending"


def test_a_connection_that_fails_is_raised_as_it_came(fake_stream):
    fake_stream(OSError("connection refused"))
    with pytest.raises(OSError, match="connection refused"):
        ca.exec_in_pod(Core(), "ns", "pod", ["true"])


@pytest.fixture
def answering_server():
    """An HTTP server that records each request and answers from `answers` (path -> (status, body))."""
    import http.server
    import json
    seen, answers = [], {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, self.headers.get("Content-Type"), self.headers.get("Authorization"),
                         json.loads(self.rfile.read(length)) if length else None))
            status, body = answers.get(self.path, (404, {"kind": "Status", "reason": "NotFound"}))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        do_GET = do_PATCH = do_POST = _answer

        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, seen, answers
    server.shutdown()
    server.server_close()


def test_plain_json_sends_the_body_type_and_token_and_returns_the_answer(tmp_path, answering_server):
    server, seen, answers = answering_server
    client = ca.api_client(kubeconfig(tmp_path / "kc", server="http://127.0.0.1:%d" % server.server_port))
    assert ca.plain_calls(client), "the pinned kubernetes library makes plain calls"
    answers["/api/v1/nodes/n1"] = (200, {"metadata": {"name": "n1"}})
    assert ca.plain_json(client, "GET", "/api/v1/nodes/n1") == {"metadata": {"name": "n1"}}
    assert ca.plain_json(client, "PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}},
                         content_type="application/merge-patch+json") == {"metadata": {"name": "n1"}}
    assert seen == [("GET", "/api/v1/nodes/n1", "application/json", "Bearer not-a-secret", None),
                    ("PATCH", "/api/v1/nodes/n1", "application/merge-patch+json", "Bearer not-a-secret",
                     {"spec": {"unschedulable": True}})]


def test_plain_json_raises_what_the_typed_apis_raise_for_a_refusal(tmp_path, answering_server):
    from kubernetes.client.rest import ApiException
    server, _seen, _answers = answering_server
    client = ca.api_client(kubeconfig(tmp_path / "kc", server="http://127.0.0.1:%d" % server.server_port))
    with pytest.raises(ApiException) as refused:
        ca.plain_json(client, "GET", "/api/v1/nodes/missing")
    assert refused.value.status == 404 and "NotFound" in refused.value.body


class Clock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("done_at, timeout, value, waited, sleeps", [
    (0, 10, 0, 0.0, []),                  # done at once: no wait
    (2, 10, 2, 4.0, [2, 2]),              # done at the third call
    (9, 5, 3, 5.0, [2, 2, 1]),            # the last pause is what is left of the timeout
    (9, 0, 0, 0.0, []),                   # a timeout of 0 calls once
])
def test_poll_calls_until_done_or_the_timeout(done_at, timeout, value, waited, sleeps):
    clock, calls = Clock(), []

    def step():
        calls.append(clock())
        return len(calls) - 1, len(calls) - 1 >= done_at
    assert ca.poll(step, timeout, 2, clock, clock.sleep) == (value, waited)
    assert clock.sleeps == sleeps


def test_plain_get_encodes_the_query():
    seen = []

    class Client:
        def param_serialize(self, method, resource_path, header_params, body, auth_settings):
            seen.append(resource_path)
            raise StopIteration
    with pytest.raises(StopIteration):
        ca.plain_get(Client(), "/api/v1/pods", {"labelSelector": "app in (a,b)", "fieldSelector": "spec.nodeName=n1"})
    assert seen == ["/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&labelSelector=app%20in%20%28a%2Cb%29"]


def test_answered_passes_a_refusal_and_names_a_call_without_an_answer():
    assert ca.answered(lambda: {"kind": "Node"}) == {"kind": "Node"}

    def refused():
        raise ca.ApiException(status=403, reason="Forbidden")

    def silent():
        raise ConnectionRefusedError("[Errno 111] Connection refused")
    with pytest.raises(ca.ApiException):
        ca.answered(refused)
    with pytest.raises(ca.Unanswered, match="Connection refused"):
        ca.answered(silent)

"""The stand-in controllers' API client against a real local HTTPS server: calls
share one kept-alive connection, a connection the server closed is replaced
once, and HTTP errors and refused connections keep the types the controllers
catch (ApiError, OSError)."""
import http.server
import json
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "lab" / "standin" / "controllers"))

from standin.kube import ApiError, Kube  # noqa: E402


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as the API server

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.connections.add(self.client_address)
        if self.path.startswith("/missing"):
            self.reply(404, {"kind": "Status", "code": 404})
        else:
            self.reply(200, {"path": self.path})
        if self.path.startswith("/close"):
            self.close_connection = True

    def do_POST(self):  # noqa: N802
        self.server.connections.add(self.client_address)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply(201, {"got": body, "type": self.headers["Content-Type"]})

    def reply(self, code, obj):
        raw = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.connections = set()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("STANDIN_APISERVER", f"https://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("STANDIN_CA", str(cert))
    monkeypatch.setenv("STANDIN_CLIENT_CERT", str(cert))
    monkeypatch.setenv("STANDIN_CLIENT_KEY", str(key))
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_calls_share_one_connection(server):
    kube = Kube()
    assert kube.get("/a") == {"path": "/a"}
    assert kube.list("/b", selector="app=x") == []
    assert kube.create("/c", {"x": 1}) == {"got": {"x": 1}, "type": "application/json"}
    assert len(server.connections) == 1


def test_a_connection_the_server_closed_is_replaced_once(server):
    kube = Kube()
    assert kube.get("/close") == {"path": "/close"}
    assert kube.get("/after") == {"path": "/after"}
    assert len(server.connections) == 2


def test_http_errors_are_api_errors_and_a_missing_object_is_none(server):
    kube = Kube()
    assert kube.get("/missing") is None
    with pytest.raises(ApiError) as raised:
        kube.request("GET", "/missing")
    assert raised.value.status == 404
    assert kube.get("/still") == {"path": "/still"}   # the connection survives an error status


def test_a_refused_connection_is_an_os_error(server, monkeypatch):
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    monkeypatch.setenv("STANDIN_APISERVER", f"https://127.0.0.1:{port}")
    with pytest.raises(OSError):
        Kube().get("/a")

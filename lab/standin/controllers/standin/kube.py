"""STAND-IN (lab only): a minimal Kubernetes API client for the stand-in controllers.

In a pod it uses the service account (token, CA) and KUBERNETES_SERVICE_HOST/PORT,
as client-go's in-cluster configuration does; outside one, STANDIN_APISERVER,
STANDIN_CA, STANDIN_CLIENT_CERT and STANDIN_CLIENT_KEY.
"""
import datetime
import http.client
import http.server
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.parse

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
KNOBS_PATH = "/api/v1/namespaces/smshare-lab/configmaps/standin-knobs"


def log(message, **fields):
    """One log line: time, level, message, key=value fields (controller-runtime's plain format)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    extra = "".join(f"\t{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in fields.items())
    print(f"{stamp}\tINFO\t{message}{extra}", flush=True)


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class Kube:
    def __init__(self):
        self._local = threading.local()
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if host:
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            self.base = f"https://{host}:{port}"
            self.ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
            with open(f"{SA}/token") as handle:
                self.token = handle.read().strip()
        else:
            self.base = os.environ["STANDIN_APISERVER"]
            self.ctx = ssl.create_default_context(cafile=os.environ["STANDIN_CA"])
            self.ctx.load_cert_chain(os.environ["STANDIN_CLIENT_CERT"], os.environ["STANDIN_CLIENT_KEY"])
            self.token = None

    def namespace(self):
        try:
            with open(f"{SA}/namespace") as handle:
                return handle.read().strip()
        except OSError:
            return os.environ.get("POD_NAMESPACE", "default")

    def request(self, method, path, body=None, content_type="application/json", query=None):
        """One call over this thread's kept-alive connection (client-go keeps its
        connections too): a TLS handshake per call cost the lab's API server and
        the stand-ins more CPU than the calls themselves."""
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                self._local.conn = None
                # A kept connection the server closed fails before the call is
                # read: try once on a new one; anything else is the caller's.
                stale = isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError))
                if attempt == 2 or not stale:
                    raise exc if isinstance(exc, OSError) else OSError(f"{method} {path}: {exc}") from exc
        if resp.status >= 400:
            raise ApiError(resp.status, raw.decode(errors="replace"))
        return json.loads(raw) if raw else {}

    def _connection(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            url = urllib.parse.urlsplit(self.base)
            conn = http.client.HTTPSConnection(url.hostname, url.port or 443, context=self.ctx, timeout=15)
            self._local.conn = conn
        return conn

    def get(self, path):
        """The object, or None when it (or its kind) does not exist."""
        try:
            return self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path, selector=None):
        query = {"labelSelector": selector} if selector else None
        try:
            return self.request("GET", path, query=query).get("items", [])
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise

    def create(self, path, obj):
        return self.request("POST", path, obj)

    def merge_patch(self, path, patch):
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def strategic_patch(self, path, patch):
        return self.request("PATCH", path, patch, "application/strategic-merge-patch+json")

    def json_patch(self, path, ops):
        return self.request("PATCH", path, ops, "application/json-patch+json")

    def apply(self, path, obj, manager, force=True):
        """Server-side apply (obj: a dict, or YAML/JSON text)."""
        return self.request("PATCH", path, obj, "application/apply-patch+yaml",
                            query={"fieldManager": manager, "force": "true" if force else "false"})

    def delete(self, path, propagation="Background"):
        try:
            return self.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                                 "propagationPolicy": propagation})
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise


def knobs(kube):
    """The lab's knobs ConfigMap (smshare-lab/standin-knobs) data, {} when absent or unreadable."""
    try:
        found = kube.get(KNOBS_PATH)
    except (ApiError, OSError):
        return {}
    return (found or {}).get("data") or {}


def serve_health(port, ready=lambda: True, metrics=lambda: "", alive=lambda: True):
    """/healthz, /readyz (200 or 503) and /metrics on `port`, in a thread."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0]
            if path == "/healthz":
                code, text = (200, "ok") if alive() else (503, "not alive")
            elif path == "/readyz":
                code, text = (200, "ok") if ready() else (503, "not ready")
            elif path == "/metrics":
                code, text = 200, metrics()
            else:
                code, text = 404, "not found"
            body = (text + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Stop:
    """SIGTERM/SIGINT set a flag (a container's PID 1 gets no default signal handling)."""
    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, *_):
        self.requested = True

    def sleep(self, seconds):
        deadline = time.monotonic() + seconds
        while not self.requested and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return not self.requested


def condition(ctype, status, reason, message, generation=None, previous=None):
    """A metav1.Condition; lastTransitionTime kept while the status does not change."""
    found = {"type": ctype, "status": status, "reason": reason, "message": message,
             "lastTransitionTime": now()}
    if not message:
        # The lab's 1.20 apiserver turns "" into null in a merge patch, which the
        # schema refuses: an empty message is left out (read it as "").
        del found["message"]
    if generation is not None:
        found["observedGeneration"] = generation
    for old in previous or []:
        if old.get("type") == ctype and old.get("status") == status and old.get("lastTransitionTime"):
            found["lastTransitionTime"] = old["lastTransitionTime"]
    return found


def same_conditions(old, new):
    def key(cond):
        return (cond.get("type"), cond.get("status"), cond.get("reason"), cond.get("message") or "",
                cond.get("observedGeneration"))
    return [key(c) for c in old or []] == [key(c) for c in new]


def fail(message):
    print(message, file=sys.stderr, flush=True)
    sys.exit(1)

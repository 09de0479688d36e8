# Apache-2.0
"""Serve the stand-in CUDA repository over http, like NVIDIA's repository.

Binds one address (the podman bridge gateway, never 0.0.0.0) with
IP_FREEBIND, so it can start before the bridge exists (podman creates it
with the first container). GET and HEAD with Last-Modified/If-Modified-Since.
With --tls-port, --cert, --key and --auth-file (one line "user:password")
the same tree is also served over https under /private/ to clients that
send those credentials (HTTP basic auth), as a site's mirror that needs a
login does; others get 401, and plain http never serves /private/.
Usage: serve.py --bind 10.88.0.1 --port 18615 --root .lab/apt/repo
                [--tls-port 18616 --cert C --key K --auth-file F]
"""
import argparse
import base64
import functools
import hmac
import http.server
import socket
import ssl
import sys
import threading

PRIVATE = "/private/"

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


class FreebindServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        super().server_bind()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    credentials = None  # "user:password" that /private/ requires

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))
        sys.stderr.flush()

    def authorized(self):
        """Strip /private/ from the path; False (401 sent) when its credentials
        are wrong or the request did not come over TLS."""
        if not self.path.startswith(PRIVATE):
            return True
        given = self.headers.get("Authorization", "")
        wanted = "Basic " + base64.b64encode(self.credentials.encode()).decode() if self.credentials else None
        tls = isinstance(self.request, ssl.SSLSocket)
        if not tls or wanted is None or not hmac.compare_digest(given.encode(), wanted.encode()):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="smshare stand-in mirror"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        self.path = "/" + self.path[len(PRIVATE):]
        return True

    def do_GET(self):  # noqa: N802 - the base class's name
        if self.authorized():
            super().do_GET()

    def do_HEAD(self):  # noqa: N802 - the base class's name
        if self.authorized():
            super().do_HEAD()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--auth-file", help='file with "user:password" for /private/')
    parser.add_argument("--tls-port", type=int, help="also serve https here (needs --cert and --key)")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args()
    if args.auth_file:
        with open(args.auth_file, encoding="utf-8") as handle:
            QuietHandler.credentials = handle.read().strip()
    if args.bind in ("0.0.0.0", "::", ""):
        parser.error("refusing to listen on every address; pass the bridge gateway")
    handler = functools.partial(QuietHandler, directory=args.root)
    if args.tls_port:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        secure = FreebindServer((args.bind, args.tls_port), handler)
        secure.socket = context.wrap_socket(secure.socket, server_side=True)
        threading.Thread(target=secure.serve_forever, daemon=True).start()
    with FreebindServer((args.bind, args.port), handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()

# Apache-2.0
"""Serve the stand-in CUDA repository over http, like NVIDIA's repository.

Binds one address (the podman bridge gateway, never 0.0.0.0) with
IP_FREEBIND, so it can start before the bridge exists (podman creates it
with the first container). GET and HEAD with Last-Modified/If-Modified-Since.
Usage: serve.py --bind 10.88.0.1 --port 18615 --root .lab/apt/repo
"""
import argparse
import functools
import http.server
import socket
import sys

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


class FreebindServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        super().server_bind()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))
        sys.stderr.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    if args.bind in ("0.0.0.0", "::", ""):
        parser.error("refusing to listen on every address; pass the bridge gateway")
    handler = functools.partial(QuietHandler, directory=args.root)
    with FreebindServer((args.bind, args.port), handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()

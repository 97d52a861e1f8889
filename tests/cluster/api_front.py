"""The real API server behind a front that a test steers: `kubectl proxy` (which
authenticates as the admin) behind a plain-HTTP front on loopback that forwards every
request, streaming the answer as it comes (a followed log, a watch), except those a test
names. Those it either holds open without a byte of answer, then drops (after
HOLD_SECONDS, or when the front stops): a server that hangs, overloaded or half dead; or
cuts after the first part of the answer, held as long, then dropped: a connection that
breaks mid-answer; or answers itself, for a state nothing here can put a server in (the kubelet's answer for a
container still being created: KWOK starts every container at once)."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from disttrain.local.ports import free_port

# Long past any client timeout a test sets, short of its hang guard: a client that does not
# time out meets a dropped connection, a different error, and the test fails without hanging.
HOLD_SECONDS = 30
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}

Rule = Callable[[str, str], bool]  # (method, path with query) -> whether it applies
Answer = Callable[[str, str], "tuple[int, dict] | None"]  # -> (status, JSON body) to answer with, or None


class Front:
    """The front's kubeconfig (no credentials: the proxy behind it has them), and the
    requests it held and answered itself, as "METHOD PATH?QUERY"."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.held: list[str] = []
        self.cut: list[str] = []
        self.answered: list[str] = []


@contextlib.contextmanager
def api_front(cluster, tmp_path: Path, *, hold: Rule = lambda *_: False, cut: Rule = lambda *_: False,
              answer: Answer = lambda *_: None, hold_seconds: float = HOLD_SECONDS) -> Iterator[Front]:
    """A front that holds each request hold() names, cuts each one cut() names after the
    first part of its answer, answers itself each one answer() gives an answer for, and
    forwards the rest."""
    proxy_port = free_port()
    proxy = subprocess.Popen([str(cluster.bin_dir / "kubectl"), "--kubeconfig", cluster.kubeconfig, "proxy",
                              "--address=127.0.0.1", f"--port={proxy_port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    try:
        assert re.match(r"Starting to serve on 127\.0\.0\.1:\d+", proxy.stdout.readline())
        front = Front(tmp_path / "front-kubeconfig")

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked answers: a followed log streams through

            def log_message(self, *_args) -> None:  # quiet: pytest shows what failed
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if hold(self.command, self.path):
                    front.held.append(f"{self.command} {self.path}")
                    stop.wait(hold_seconds)  # no answer; the client's own timeout must end the wait
                    self.close_connection = True
                    return
                if (own := answer(self.command, self.path)) is not None:
                    front.answered.append(f"{self.command} {self.path}")
                    data = json.dumps(own[1]).encode()
                    self.send_response(own[0])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._forward(body)

            def _forward(self, body: bytes) -> None:
                upstream = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=HOLD_SECONDS * 10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                reply = upstream.getresponse()
                self.send_response(reply.status, reply.reason)
                for k, v in reply.getheaders():
                    if k.lower() not in HOP_BY_HOP | {"content-length"}:
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                cutting = cut(self.command, self.path)
                try:
                    while chunk := reply.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        if cutting:
                            front.cut.append(f"{self.command} {self.path}")
                            stop.wait(hold_seconds)
                            self.close_connection = True  # no last chunk: the answer breaks off
                            return
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the client stopped reading (a followed log it closed)
                    self.close_connection = True
                finally:
                    upstream.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        front.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "front",
            "clusters": [{"name": "front", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
            "users": [{"name": "front", "user": {}}],
            "contexts": [{"name": "front", "context": {"cluster": "front", "user": "front"}}]}))
        try:
            yield front
        finally:
            stop.set()
            server.shutdown()
            server.server_close()
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)

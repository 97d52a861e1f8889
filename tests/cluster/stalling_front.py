"""An API server that answers some requests and hangs on others: the real one, behind
`kubectl proxy` (which authenticates as the admin), behind a plain-HTTP front that
forwards every request except those a test names, which it holds open without a byte of
answer, then drops (after HOLD_SECONDS, or when the front stops). What a client does when one of its requests meets a
server that hangs (overloaded, a half-dead connection) is shown only so."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from disttrain_operator.ports import free_port

# Long past any client timeout a test sets, short of its hang guard: a client that does not
# time out meets a dropped connection, a different error, and the test fails without hanging.
HOLD_SECONDS = 30
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class Front:
    """The front's kubeconfig (no credentials: the proxy behind it has them) and the
    requests it held, as "METHOD PATH?QUERY"."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.held: list[str] = []


@contextlib.contextmanager
def stalling_front(cluster, tmp_path: Path, hold: Callable[[str, str], bool]) -> Iterator[Front]:
    """A front on loopback that holds each request for which hold(method, path_and_query)
    is true and forwards the rest (answers read whole: no watch or followed log passes)."""
    proxy_port = free_port()
    proxy = subprocess.Popen([str(cluster.bin_dir / "kubectl"), "--kubeconfig", cluster.kubeconfig, "proxy",
                              "--address=127.0.0.1", f"--port={proxy_port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    try:
        assert re.match(r"Starting to serve on 127\.0\.0\.1:\d+", proxy.stdout.readline())
        front = Front(tmp_path / "front-kubeconfig")

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:  # quiet: pytest shows what failed
                pass

            def _any(self) -> None:
                if hold(self.command, self.path):
                    front.held.append(f"{self.command} {self.path}")
                    stop.wait(HOLD_SECONDS)  # no answer; the client's own timeout must end the wait
                    self.close_connection = True
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status, answer.reason)
                for k, v in answer.getheaders():
                    if k.lower() not in HOP_BY_HOP | {"content-length"}:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
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

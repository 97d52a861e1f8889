"""The trainer's HTTP server, on local rank 0 of each pod (docs/pod-contract.md): `/metrics`
(Prometheus), `/healthz`, `/status` (the report StatusSink holds), and the operator's
`POST /checkpoint` before a stop (checkpoint-then-evict), which it hands to drain.py."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from disttrain_trainer.drain import MAX_HOLD_SECONDS, CheckpointRequest

if TYPE_CHECKING:
    from disttrain_trainer.metrics import StatusSink

log = logging.getLogger("disttrain_trainer")


# A /checkpoint request may wait this long for the checkpoint before it is answered 202.
MAX_WAIT_SECONDS = 300


@dataclass(frozen=True, slots=True)
class Control:
    """The operator's /checkpoint endpoint: its token and where requests go (drain.py)."""

    token: str
    request: CheckpointRequest


class StatusServer:
    """/metrics, /healthz, /status on a daemon thread; POST /checkpoint with `control`."""

    def __init__(self, port: int, registry: CollectorRegistry, status: StatusSink,
                 control: Control | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = generate_latest(registry), CONTENT_TYPE_LATEST
                elif path == "/healthz":
                    body, ctype = b"ok", "text/plain"
                elif path == "/status":
                    body, ctype = status.render(), "application/json"
                else:
                    self.send_error(404)
                    return
                self._send(200, body, ctype)

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                path, _, query = self.path.partition("?")
                if path != "/checkpoint" or control is None:
                    self.send_error(404)
                    return
                given = self.headers.get("Authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {control.token}".encode()):
                    self.send_error(401)
                    return
                try:
                    hold, wait = checkpoint_query(query)
                except ValueError as exc:
                    self._send(400, json.dumps({"error": str(exc)}).encode(), "application/json")
                    return
                control.request.ask(hold)
                held = control.request.held.wait(wait)
                self._send(200 if held else 202, status.render(), "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics-http", daemon=True)
        self.thread.start()
        log.info("serving /metrics /healthz /status%s on :%d", " /checkpoint" if control else "", port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def checkpoint_query(query: str) -> tuple[int, float]:
    """holdSeconds (1..MAX_HOLD_SECONDS, required) and waitSeconds (0..MAX_WAIT_SECONDS,
    default 0) of a /checkpoint request."""
    params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
    try:
        hold = int(params["holdSeconds"])
        wait = float(params.get("waitSeconds", "0"))
    except (KeyError, ValueError):
        raise ValueError("want ?holdSeconds=<1..3600>[&waitSeconds=<0..300>]") from None
    if not 1 <= hold <= MAX_HOLD_SECONDS or not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ValueError(f"holdSeconds must be within 1..{MAX_HOLD_SECONDS}, waitSeconds within 0..{MAX_WAIT_SECONDS}")
    return hold, wait

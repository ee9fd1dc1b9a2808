"""`purelink serve --metrics HOST:PORT`: `/metrics`, `/healthz` and `/readyz` over HTTP.

Why it exists: an operator's Prometheus scrapes `/metrics`, and their
orchestrator asks two other questions of the same port -- is the process
up (`/healthz`: 200 "ok" while it answers at all) and may traffic go to it
(`/readyz`: 200 once the listener can take records -- its loop running, its
sockets bound, its store writable, its cluster reachable when it has one;
503 and the reason in a few words when not).  Any other path is 404.  One
small threaded HTTP server from the standard library does all three, on a
thread of its own; the metrics are read when a scrape comes (metrics.py).
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from purelink import _address
from purelink.errors import Error
from purelink.listener.listener import not_ready
from purelink.metrics import ListenerCollector, prometheus_core

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from purelink.listener.listener import Listener

__all__ = ["MetricsServer"]

_TEXT = "text/plain; charset=utf-8"


class MetricsServer:
    """`/metrics`, `/healthz`, `/readyz` for a listener: what `serve --metrics` runs.

    The registry holds the listener's collector and prometheus-client's
    process collector (CPU seconds, memory, open files) and platform collector.
    """

    def __init__(self, listener: Listener, address: str) -> None:
        host, port = _address.parse_hostport(address)  # ValueError if malformed
        core = prometheus_core()
        from prometheus_client import PlatformCollector, ProcessCollector  # noqa: PLC0415

        self.listener = listener
        self.registry: CollectorRegistry = core.CollectorRegistry(auto_describe=False)
        self.registry.register(ListenerCollector(listener))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        shown = _address.format_hostport(host, port)
        try:
            family, sockaddr = _address.resolve(host, port, socket.SOCK_STREAM)
            self._httpd = _Server(sockaddr, family, self)
        except OSError as exc:
            raise Error(f"cannot serve --metrics on {shown}: {exc.strerror or exc}") from None
        bound = self._httpd.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        """The bound (host, port)."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="purelink-metrics", daemon=True
        )
        self._thread.start()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/healthz":
            return 200, _TEXT, b"ok\n"
        if path == "/readyz":
            why = not_ready(self.listener)
            if why is None:
                return 200, _TEXT, b"ready\n"
            return 503, _TEXT, f"not ready: {why}\n".encode()
        return 404, _TEXT, b"not found: /metrics, /healthz and /readyz are here\n"

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, sockaddr: tuple[str, int], family: int, owner: MetricsServer) -> None:
        self.address_family = family
        self.owner = owner
        super().__init__(sockaddr, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10.0  # seconds a client may take to send its request: no thread held for ever

    def do_GET(self) -> None:
        self._reply(body=True)

    def do_HEAD(self) -> None:
        self._reply(body=False)

    def _reply(self, *, body: bool) -> None:
        status, kind, data = self.server.owner.answer(urlsplit(self.path).path)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape every few seconds is not news for the log."""

"""Serving /metrics over HTTP, from the command line or inside the training process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry

from rlscope.errors import RLScopeError
from rlscope.exporter.collector import RLScopeCollector, RunDirs

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ExporterServer", "ServeError", "serve"]

DEFAULT_PORT = 9400
DEFAULT_HOST = "127.0.0.1"  # loopback unless asked: the metrics name hosts, sources and errors


class ServeError(RLScopeError):
    """The exporter could not listen on the requested address."""


class _Server(ThreadingWSGIServer):
    # socketserver's default listen backlog is 5: with more concurrent scrapers the kernel
    # drops connections and clients retry after 1 s (then 3 s), which was the whole p99.
    request_queue_size = 128


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No access-log line on stderr per scrape."""


def _listen(host: str, port: int, registry: CollectorRegistry) -> tuple[WSGIServer, threading.Thread]:
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("ExporterHTTPServer", (_Server,), {"address_family": family})
    httpd = make_server(host, port, make_wsgi_app(registry), server_class, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="rlscope-exporter", daemon=True)
    thread.start()
    return httpd, thread


class ExporterServer:
    """A running exporter: ``url`` to scrape, ``collector`` behind it, ``stop()`` to end it."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread, collector: RLScopeCollector, host: str):
        self._httpd = httpd
        self._thread = thread
        self.collector = collector
        self.host = host
        self.port: int = httpd.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host or "0.0.0.0"  # "": every interface
        return f"http://{host}:{self.port}/metrics"

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket; safe to call twice."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout)
        self._httpd.server_close()

    def __enter__(self) -> ExporterServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    run_dirs: RunDirs,
    port: int = DEFAULT_PORT,
    host: str = DEFAULT_HOST,
    *,
    registry: CollectorRegistry | None = None,
    min_refresh_s: float = 1.0,
    runs: Sequence[str] | None = None,
) -> ExporterServer:
    """Serve the metrics of ``run_dirs`` at ``http://host:port/metrics`` from a daemon thread.

    Returns at once; call ``stop()`` on the result (or use it as a context manager). Port 0
    picks a free port (read it from ``.port``). ``registry`` defaults to a fresh one, so the
    process's other metrics are not mixed in and ``serve`` can be called more than once.
    Raises ``ServeError`` when the address cannot be bound (port in use, bad host).
    """
    registry = CollectorRegistry() if registry is None else registry
    collector = RLScopeCollector(run_dirs, registry=registry, min_refresh_s=min_refresh_s, runs=runs)
    try:
        httpd, thread = _listen(host, port, registry)
    except OSError as exc:
        registry.unregister(collector)
        raise ServeError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    return ExporterServer(httpd, thread, collector, host)

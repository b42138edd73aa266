"""Serve run directories' metrics for Prometheus at http://HOST:PORT/metrics until stopped.

usage: rlscope export RUN_DIR [RUN_DIR ...] [--port 9400] [--host 127.0.0.1]

Each scrape reads only the segments added since the previous one, so the exporter can
run beside a live training job for its whole length. Every series has a run label (the
directory's name). Alert and recording rules for these metrics are in rules/ of the
repository, a Grafana dashboard in dashboards/grafana/; see docs/prometheus.md.
Listens on loopback by default: pass --host 0.0.0.0 to let a remote Prometheus scrape.
Port 0 picks a free port; the address is printed on the first line. Ctrl-C or SIGTERM stops.
A RUN_DIR that does not exist yet (or is empty) is served as down until the job writes it.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence

import pyarrow.fs as pafs

from rlscope.cli._args import check_port, parser_for, seconds
from rlscope.errors import RLScopeError
from rlscope.exporter import DEFAULT_HOST, DEFAULT_PORT, serve
from rlscope.trace.reader import RunReader
from rlscope.trace.store import locate

__all__ = ["main"]

log = logging.getLogger("rlscope")


def _written(run_dir: str) -> bool:
    """Whether ``run_dir`` holds anything a run's writer did not just start (a temporary
    meta.json, a status folder): if not, the job has not written it yet."""
    loc = locate(run_dir)
    info = loc.fs.get_file_info(loc.path)
    if info.type == pafs.FileType.NotFound:
        return False
    if info.type != pafs.FileType.Directory:
        return True
    entries = loc.fs.get_file_info(pafs.FileSelector(loc.path))
    return any(not e.base_name.startswith((".", "_")) for e in entries)


def main(argv: Sequence[str]) -> int:
    parser = parser_for("export", __doc__)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument(
        "--min-refresh",
        type=seconds(zero=True),
        default=1.0,
        metavar="SECONDS",
        help="scrapes within this share one read (1)",
    )
    args = parser.parse_args(argv)
    check_port(args.port)
    for run_dir in args.run_dirs:
        try:
            RunReader(run_dir)  # a foreign directory or a file is a one-line error now, not a silent 0 later
        except RLScopeError:
            if _written(run_dir):
                raise
            # the training job has not written it yet: served as down until it has
            log.warning("%s: no run here yet; rlscope_run_up is 0 until the training job writes it", run_dir)

    # the handler only appends: an Event's lock, taken again by a second SIGTERM inside the
    # first one's set(), would deadlock
    stopped: list[int] = []
    server = serve(args.run_dirs, args.port, args.host, min_refresh_s=args.min_refresh)
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: stopped.append(signum))
    try:
        runs = ", ".join(state.run for state in server.collector.states)
        print(f"serving {server.url} for {runs}; Ctrl-C stops", flush=True)
        while not stopped:
            time.sleep(0.2)  # a signal ends the sleep at once
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()  # still under the handler: a SIGTERM while stopping does not kill it
        signal.signal(signal.SIGTERM, previous)
    return 0

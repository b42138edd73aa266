"""Serve a live dashboard of run directories at http://HOST:PORT/ until stopped.

usage: rlscope dashboard RUN_DIR [RUN_DIR ...] [--port 8050] [--host 127.0.0.1] [--refresh 5]

Pages: Overview (step time by phase, MFU waterfall, findings), Rollout, Async, Mismatch,
Rewards, GPU and Advice (topology what-if). Pick one run in the header, or several to
overlay them; ?runs=0,1 in the address preselects runs by their order on this command line.
Every refresh reads only the segments added since the last one, so the dashboard can run
beside a training job for its whole length; a run directory may still be empty.
Only the directories named here can be shown. Listens on loopback by default: the dashboard
has no login, so pass --host 0.0.0.0 only on a network you trust.
Port 0 picks a free port; the address is printed on the first line. Ctrl-C or SIGTERM stops.
Needs the dashboard extra: pip install 'rlscope[dashboard]'.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Sequence

from rlscope.advice.finding import fmt_count
from rlscope.cli._args import check_port, parser_for, seconds
from rlscope.errors import RLScopeError
from rlscope.trace.store import require_directory

__all__ = ["main"]

log = logging.getLogger("rlscope")

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def main(argv: Sequence[str]) -> int:
    parser = parser_for("dashboard", __doc__)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--port", type=int, default=8050, help="port to listen on (default 8050; 0 picks one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--refresh",
        type=seconds(zero=True),
        default=5.0,
        metavar="SECONDS",
        help="refresh period, longer while a page renders (5; 0 = never)",
    )
    args = parser.parse_args(argv)
    check_port(args.port)
    for run_dir in args.run_dirs:
        require_directory(run_dir)  # it may still be empty: a run about to start
    try:
        from werkzeug.serving import make_server

        from rlscope.dashboards.app import create_app
    except ImportError as exc:
        raise RLScopeError(f"the dashboard needs dash and plotly ({exc}): pip install 'rlscope[dashboard]'") from None

    # bound here, before the app is built: werkzeug prints its own lines and exits when the port is taken
    try:
        listener = socket.create_server((args.host, args.port), family=_family(args.host))
    except OSError as exc:
        reason = (exc.strerror or str(exc)).split(" (while attempting")[0]  # create_server adds the address
        raise RLScopeError(f"cannot listen on {args.host}:{args.port} ({reason})") from None
    port = listener.getsockname()[1]
    app = create_app(args.run_dirs, refresh_s=args.refresh)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    with listener:  # the server serves a duplicate of it
        server = make_server(args.host, port, app.server, threaded=True, fd=listener.fileno())
    host = f"[{args.host}]" if ":" in args.host else args.host or "0.0.0.0"  # "": every interface
    if args.host not in _LOOPBACK:
        log.warning("listening on %s: anyone who can reach it sees these runs (the dashboard has no login)", host)
    n_runs = len(args.run_dirs)
    print(f"serving http://{host}:{port}/ for {fmt_count(n_runs, 'run')}; Ctrl-C stops", flush=True)

    stopped: list[int] = []  # appended to by the handler: no lock a second SIGTERM could deadlock on
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: stopped.append(signum))
    thread = threading.Thread(target=server.serve_forever, name="rlscope-dashboard", daemon=True)
    thread.start()
    try:
        while not stopped and thread.is_alive():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()  # still under the handler: a SIGTERM while stopping does not kill it
        thread.join(5)
        signal.signal(signal.SIGTERM, previous)
    return 0

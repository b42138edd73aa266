"""Collect GPU counters (NVML) into a run directory until interrupted.

usage: rlscope collect gpu --run-dir RUN_DIR [--interval 0.5] [--role ROLE] [--duration SECONDS]

Samples utilisation, memory, power and SM clock of every GPU on this host. Run one per
node, or start one per node of a Ray cluster from Python with
rlscope.collectors.ray_launch.start_gpu_samplers(run_dir). Exits with code 4 and a
one-line reason when no GPU can be read (no nvidia-ml-py, no driver, no device).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rlscope.advice.finding import fmt_count
from rlscope.cli._args import parser_for, seconds
from rlscope.errors import RunDirError

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    parser = parser_for("collect", __doc__)
    parser.add_argument("what", choices=["gpu"], help="what to collect")
    parser.add_argument("--run-dir", required=True, metavar="RUN_DIR")
    parser.add_argument(
        "--interval", type=seconds(zero=False), default=0.5, metavar="SECONDS", help="between samples (default 0.5)"
    )
    parser.add_argument("--role", default="unknown", help="role of this host's GPUs: trainer, rollout, ...")
    parser.add_argument("--duration", type=seconds(zero=False), metavar="SECONDS", help="stop after this many seconds")
    args = parser.parse_args(argv)

    from rlscope.collectors.gpu_sampler import GpuSampler
    from rlscope.collectors.nvml import NvmlBackend
    from rlscope.trace.recorder import Recorder
    from rlscope.trace.store import check_can_write, locate

    check_can_write(locate(args.run_dir))  # one line now, not a sampler that writes nothing for hours
    backend = NvmlBackend()  # raises NoGpuError (exit 4) before anything is written
    with Recorder(args.run_dir, flush_interval=max(1.0, args.interval * 4)) as rec:
        sampler = GpuSampler(rec, interval=args.interval, role=args.role, backend=lambda: backend)
        sampler.start()
        n_gpus = backend.device_count()
        print(f"sampling {fmt_count(n_gpus, 'GPU')} every {args.interval} s into {args.run_dir}; Ctrl-C stops")
        deadline = None if args.duration is None else time.monotonic() + args.duration
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        finally:
            sampler.stop()
    status = rec.status()  # after close: what reached the disk, not what was queued
    print(f"{status['rows_written']} of {sampler.samples} samples written, {fmt_count(sampler.errors, 'read error')}")
    if sampler.samples and status["rows_written"] < sampler.samples:
        raise RunDirError(f"{args.run_dir}: samples were not written ({status['last_error'] or 'see the warnings'})")
    return 0

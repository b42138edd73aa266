"""Sample every GPU of this host on a timer into the run directory's ``gpu`` table.

The sampler runs on its own daemon thread and hands rows to a ``Recorder``; a GPU that
fails to read is skipped for that tick and counted, so a flaky driver costs samples, not
the training job. ``start()`` returns False (and logs once) when no GPU can be read, which
is how the verl hook stays a no-op on CPU machines.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping

from rlscope.collectors.nvml import GpuBackend, NoGpuError, NvmlBackend
from rlscope.trace.recorder import Recorder

__all__ = ["GpuSampler"]

log = logging.getLogger("rlscope")


class GpuSampler:
    """Read all GPUs every ``interval`` seconds and log them to ``recorder``.

    ``role`` labels every GPU (``"trainer"``, ``"rollout"``, ...) or, as a mapping from GPU
    index to role, each one; unmapped GPUs get ``"unknown"``. ``backend`` defaults to a
    lazily created ``NvmlBackend``; tests pass a ``FakeBackend`` factory.
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        interval: float = 0.5,
        role: str | Mapping[int, str] = "unknown",
        host: str | None = None,
        backend: Callable[[], GpuBackend] = NvmlBackend,
        clock: Callable[[], float] = time.time,
    ):
        if not (math.isfinite(interval) and interval > 0):  # NaN would busy-loop, inf never sample
            raise ValueError(f"interval must be a finite number of seconds above 0, got {interval!r}")
        self.recorder = recorder
        self.interval = interval
        self.role = role
        self.host = host or recorder.host
        self._backend_factory = backend
        self._backend: GpuBackend | None = None
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.samples = 0
        self.errors = 0
        self._warned = False
        self._close_on_exit = False  # stop() timed out: the thread closes the library as it ends

    def _role_of(self, index: int) -> str:
        if isinstance(self.role, str):
            return self.role
        return self.role.get(index, "unknown")

    def start(self) -> bool:
        """Open the GPU library and start sampling; False (logged) if there is no GPU. Started
        already, it keeps the thread it has (True); stopped, it starts again, unless a stop is
        still waiting for a read that hangs (False, logged)."""
        if self._thread is not None and self._thread.is_alive():
            if not self._stop.is_set():
                return True
            log.warning("rlscope GPU sampler: not restarted, the last read has not returned since stop()")
            return False
        self._stop.clear()
        self._close_on_exit = False
        try:
            self._backend = self._backend_factory()
        except NoGpuError as exc:
            log.warning("rlscope GPU sampler disabled: %s", exc)
            return False
        except Exception as exc:  # noqa: BLE001 - a collector never crashes the job
            log.warning("rlscope GPU sampler disabled: %s: %s", type(exc).__name__, exc)
            return False
        self._thread = threading.Thread(target=self._loop, name="rlscope-gpu-sampler", daemon=True)
        self._thread.start()
        return True

    def sample_once(self) -> int:
        """Read every GPU once and queue the rows; return how many GPUs were read."""
        backend = self._backend
        if backend is None:
            return 0
        now = self._clock()
        rows = []
        for index in range(backend.device_count()):
            try:
                s = backend.sample(index)
            except Exception as exc:  # noqa: BLE001 - one bad read skips one sample
                self.errors += 1
                if not self._warned:
                    self._warned = True
                    log.warning("rlscope GPU sampler: reading GPU %d failed (%s); skipping such samples", index, exc)
                continue
            rows.append(
                {
                    "time": now,
                    "host": self.host,
                    "gpu": s.gpu,
                    "role": self._role_of(s.gpu),
                    "util_pct": s.util_pct,
                    "mem_used_bytes": s.mem_used_bytes,
                    "mem_total_bytes": s.mem_total_bytes,
                    "power_w": s.power_w,
                    "sm_clock_mhz": s.sm_clock_mhz,
                }
            )
        self.ticks += 1
        self.samples += len(rows)
        if rows:
            self.recorder.log_gpu(rows)
        return len(rows)

    def _loop(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001
                self.errors += 1
                log.warning("rlscope GPU sampler: tick failed (%s)", exc)
            # a read slower than the interval skips the ticks it missed rather than firing them
            # back to back: a burst of samples of one moment would weigh it more in every average
            next_tick = max(next_tick + self.interval, time.monotonic())
            self._stop.wait(max(0.0, next_tick - time.monotonic()))
        if self._close_on_exit:  # stop() gave up waiting for this thread's last read
            self._close_backend()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and release the GPU library."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # a read still hangs: the thread closes the library when it returns
                self._close_on_exit = True
                if self._thread.is_alive():
                    return
        self._close_backend()

    def _close_backend(self) -> None:
        if self._backend is not None:
            try:
                self._backend.close()
            except Exception:  # noqa: BLE001
                pass
            self._backend = None

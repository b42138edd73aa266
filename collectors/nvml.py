"""GPU counters behind a small backend interface, so the sampler never touches NVML directly.

``NvmlBackend`` is the only code that imports ``pynvml`` (from the ``nvidia-ml-py``
package), and only when it is created: ``import rlscope`` never loads NVML. A missing
library, a missing driver or zero GPUs is a ``NoGpuError`` with a one-line reason. Tests
and CPU-only machines use ``FakeBackend``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlscope.errors import RLScopeError

__all__ = ["FakeBackend", "GpuBackend", "GpuSample", "NoGpuError", "NvmlBackend"]


class NoGpuError(RLScopeError):
    """No NVIDIA GPU can be read here (no library, no driver, or no device)."""

    exit_code = 4


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU; a counter the device does not support is None."""

    gpu: int
    util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    sm_clock_mhz: float | None


class GpuBackend(Protocol):
    """What the sampler needs from a GPU library."""

    def device_count(self) -> int: ...

    def sample(self, index: int) -> GpuSample: ...

    def close(self) -> None: ...


class NvmlBackend:
    """Reads GPUs through NVML. Creating it initialises NVML; ``close()`` shuts it down."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NoGpuError("NVML is not installed: pip install nvidia-ml-py") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoGpuError(f"no NVIDIA driver or GPU could be opened through NVML ({exc})") from None
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise NoGpuError(f"NVML could not count GPUs ({exc})") from None
        if count == 0:
            pynvml.nvmlShutdown()
            raise NoGpuError("NVML found no GPU on this host")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def device_count(self) -> int:
        return len(self._handles)

    def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One counter, None where the device does not support it."""
        try:
            return fn(*args)
        except self._nvml.NVMLError_NotSupported:
            return None

    def sample(self, index: int) -> GpuSample:
        nv, handle = self._nvml, self._handles[index]
        util = self._read(nv.nvmlDeviceGetUtilizationRates, handle)
        mem = self._read(nv.nvmlDeviceGetMemoryInfo, handle)
        power_mw = self._read(nv.nvmlDeviceGetPowerUsage, handle)
        clock = self._read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        return GpuSample(
            gpu=index,
            util_pct=None if util is None else float(util.gpu),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=None if clock is None else float(clock),
        )

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


@dataclass
class FakeBackend:
    """A scripted backend for tests: utilisation per GPU per call, and failures on demand.

    ``utils[g]`` is the sequence of utilisation readings GPU ``g`` returns, one per
    successful read of that GPU (the last one repeats). ``fail_at`` maps a call number (0-based, over all ``sample`` calls) to the
    exception raised then, to test errors mid-run.
    """

    utils: Sequence[Sequence[float]]
    mem_total_bytes: int = 80 * 2**30
    fail_at: dict[int, Exception] = field(default_factory=dict)
    calls: int = 0
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _reads: dict[int, int] = field(default_factory=dict, repr=False)

    def device_count(self) -> int:
        return len(self.utils)

    def sample(self, index: int) -> GpuSample:
        with self._lock:
            call, self.calls = self.calls, self.calls + 1
        if call in self.fail_at:
            raise self.fail_at[call]
        series = self.utils[index]
        with self._lock:
            nth = self._reads[index] = self._reads.get(index, -1) + 1
        util = series[min(nth, len(series) - 1)]
        return GpuSample(
            index, float(util), int(self.mem_total_bytes * util / 100), self.mem_total_bytes, 100 + 6 * util, 1980.0
        )

    def close(self) -> None:
        self.closed = True

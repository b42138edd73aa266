"""A stand-in for NVML's Python binding (``pynvml``): two GPUs at fixed readings.

Put this folder first on PYTHONPATH to run the hook's GPU sampler where there is no GPU.
"""

from types import SimpleNamespace

NVML_CLOCK_SM = 1


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 2


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=[37, 81][handle], memory=0)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    return SimpleNamespace(used=2**30, total=80 * 2**30, free=79 * 2**30)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return 300_000


def nvmlDeviceGetClockInfo(handle: int, kind: int) -> int:
    return 1980

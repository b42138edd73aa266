"""The NVML sampler: real NVML code against a fake pynvml, a scripted backend, faults mid-run, Ray."""

from __future__ import annotations

import functools
import itertools
import logging
import shutil
import socket
import sys
import tempfile
import threading
import time
import types

import pytest

from rlscope import Recorder, RunReader
from rlscope.cli import main
from rlscope.collectors.gpu_sampler import GpuSampler
from rlscope.collectors.nvml import FakeBackend, NoGpuError, NvmlBackend


def _fake_pynvml(count: int = 2, power_supported: bool = True) -> types.ModuleType:
    """A stand-in for the pynvml module with NVML's function names and units (mW, bytes)."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    mod.NVMLError, mod.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    mod.NVML_CLOCK_SM = 1
    mod.shutdowns = 0
    mod.nvmlInit = lambda: None

    def shutdown() -> None:
        mod.shutdowns += 1

    mod.nvmlShutdown = shutdown
    mod.nvmlDeviceGetCount = lambda: count
    mod.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + int(h[-1]), memory=10)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=30 * 2**30, total=80 * 2**30, free=50 * 2**30)

    def power(h: str) -> int:
        if not power_supported:
            raise NVMLError_NotSupported()
        return 350_500  # milliwatts

    mod.nvmlDeviceGetPowerUsage = power
    mod.nvmlDeviceGetClockInfo = lambda h, kind: 1755
    return mod


def test_nvml_backend_reads_counters_in_rlscope_units(monkeypatch):
    fake = _fake_pynvml(count=2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend()
    assert backend.device_count() == 2
    s = backend.sample(1)
    assert (s.gpu, s.util_pct, s.mem_used_bytes, s.mem_total_bytes, s.power_w, s.sm_clock_mhz) == (
        1,
        41.0,
        30 * 2**30,
        80 * 2**30,
        350.5,
        1755.0,
    )
    backend.close()
    assert fake.shutdowns == 1


def test_unsupported_counter_is_none_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(count=1, power_supported=False))
    assert NvmlBackend().sample(0).power_w is None


def test_missing_library_driver_or_device_is_a_clear_no_gpu_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NoGpuError, match="pip install nvidia-ml-py"):
        NvmlBackend()
    zero = _fake_pynvml(count=0)
    monkeypatch.setitem(sys.modules, "pynvml", zero)
    with pytest.raises(NoGpuError, match="found no GPU"):
        NvmlBackend()
    assert zero.shutdowns == 1
    broken = _fake_pynvml()

    def no_driver() -> None:
        raise broken.NVMLError("Driver Not Loaded")

    broken.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    with pytest.raises(NoGpuError, match="Driver Not Loaded"):
        NvmlBackend()


def test_samples_follow_the_backend_with_roles_and_host(tmp_path):
    run = str(tmp_path / "run")
    clock = itertools.count(1000.0, 0.5)
    backend = FakeBackend(utils=[[95, 90, 5], [10, 15, 100]])
    with Recorder(run, host="node-a") as rec:
        sampler = GpuSampler(rec, role={0: "trainer"}, backend=lambda: backend, clock=lambda: next(clock))
        sampler._backend = backend  # drive ticks by hand, no thread
        for _ in range(3):
            assert sampler.sample_once() == 2
    rows = sorted(RunReader(run).read("gpu").to_pylist(), key=lambda r: (r["time"], r["gpu"]))
    assert [(r["time"], r["gpu"], r["util_pct"]) for r in rows] == [
        (1000.0, 0, 95.0),
        (1000.0, 1, 10.0),
        (1000.5, 0, 90.0),
        (1000.5, 1, 15.0),
        (1001.0, 0, 5.0),
        (1001.0, 1, 100.0),
    ]
    assert {r["role"] for r in rows if r["gpu"] == 0} == {"trainer"}
    assert {r["role"] for r in rows if r["gpu"] == 1} == {"unknown"}
    assert {r["host"] for r in rows} == {"node-a"}


def test_errors_mid_run_skip_samples_and_the_thread_keeps_going(tmp_path, caplog):
    run = str(tmp_path / "run")
    backend = FakeBackend(utils=[[50], [60]], fail_at={1: RuntimeError("GPU is lost"), 4: OSError("xid 79")})
    with caplog.at_level(logging.WARNING, logger="rlscope"), Recorder(run, flush_interval=0.05) as rec:
        sampler = GpuSampler(rec, interval=0.01, backend=lambda: backend)
        assert sampler.start()
        deadline = time.monotonic() + 5
        while sampler.ticks < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        sampler.stop()
    assert sampler.errors == 2 and sampler.ticks >= 10
    assert backend.closed
    assert RunReader(run).row_count("gpu") == sampler.samples == 2 * sampler.ticks - 2
    assert sum("reading GPU" in r.getMessage() for r in caplog.records) == 1  # warned once


def test_no_gpu_makes_the_sampler_a_logged_no_op(tmp_path, caplog):
    def no_gpu() -> FakeBackend:
        raise NoGpuError("NVML is not installed: pip install nvidia-ml-py")

    with caplog.at_level(logging.WARNING, logger="rlscope"), Recorder(str(tmp_path / "run")) as rec:
        sampler = GpuSampler(rec, backend=no_gpu)
        assert sampler.start() is False
        sampler.stop()
    assert any("GPU sampler disabled" in r.getMessage() for r in caplog.records)


def test_collect_cli_without_a_gpu_exits_4_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert main(["collect", "gpu", "--run-dir", str(tmp_path / "run")]) == 4
    err = capsys.readouterr().err
    assert err == "rlscope: NVML is not installed: pip install nvidia-ml-py\n"
    assert not (tmp_path / "run").exists()  # nothing written when there is nothing to sample
    assert main(["collect", "gpu", "--run-dir", str(tmp_path / "run"), "--interval", "0"]) == 2


@pytest.mark.parametrize("count, gpus", [(2, "2 GPUs"), (1, "1 GPU")])
def test_collect_cli_samples_for_a_duration(tmp_path, capsys, monkeypatch, count, gpus):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(count=count))
    run = str(tmp_path / "run")
    assert (
        main(["collect", "gpu", "--run-dir", run, "--interval", "0.05", "--duration", "0.5", "--role", "rollout"]) == 0
    )
    rows = RunReader(run).read("gpu").to_pylist()
    assert len(rows) >= 4 and {r["role"] for r in rows} == {"rollout"} and {r["gpu"] for r in rows} == set(range(count))
    out = capsys.readouterr().out
    assert out.startswith(f"sampling {gpus} every 0.05 s into {run}; Ctrl-C stops\n")
    assert f"{len(rows)} of {len(rows)} samples written, 0 read errors" in out


def test_collect_cli_refuses_a_run_directory_it_cannot_write(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(count=1))
    (tmp_path / "afile").write_text("")
    for run, reason in (
        (tmp_path / "afile", "is a file, expected a run directory"),
        (tmp_path / "afile" / "run", f"cannot create it, {tmp_path / 'afile'} is a file"),
    ):
        assert main(["collect", "gpu", "--run-dir", str(run), "--duration", "0.2"]) == 1
        assert capsys.readouterr().err == f"rlscope: {run}: {reason}\n"


def test_collect_cli_says_so_when_samples_do_not_reach_the_disk(tmp_path, capsys, monkeypatch):
    import rlscope.trace.recorder as recorder_module

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(count=1))
    monkeypatch.setattr(recorder_module, "write_segment", full_disk)
    run = str(tmp_path / "run")
    assert main(["collect", "gpu", "--run-dir", run, "--interval", "0.05", "--duration", "0.3"]) == 1
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]  # after the recorder's warning when the write failed
    assert out.splitlines()[-1].startswith("0 of ") and last.startswith(f"rlscope: {run}: samples were not written (")
    assert "No space left on device" in last


class _Unpicklable(dict):
    """Arrives at a Ray worker as an error: as an actor on a node without rlscope would."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise RuntimeError("no rlscope on this node")


def test_one_sampler_actor_per_ray_node(tmp_path, monkeypatch, caplog):
    ray = pytest.importorskip("ray")
    from rlscope.collectors.ray_launch import start_gpu_samplers, stop_gpu_samplers

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    run = str(tmp_path / "run")
    # Ray's socket paths must stay under 108 bytes: pytest's tmp_path is too deep
    ray_tmp = tempfile.mkdtemp(prefix="rlsray", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=ray_tmp,
        log_to_driver=False,
        runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled"}},
    )
    try:
        # an actor that cannot start (its arguments do not unpickle on the node) is logged and left out
        with caplog.at_level(logging.WARNING, logger="rlscope"):
            assert start_gpu_samplers(run, interval=0.05, role=_Unpicklable()) == []
        assert "did not start" in caplog.text
        handles = start_gpu_samplers(run, interval=0.05, backend=functools.partial(FakeBackend, utils=[[70], [30]]))
        assert len(handles) == len([n for n in ray.nodes() if n["Alive"]]) == 1
        time.sleep(1.0)
        (stats,) = stop_gpu_samplers(handles)
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert stats["samples"] > 0 and stats["errors"] == 0
    rows = RunReader(run).read("gpu").to_pylist()
    assert len(rows) == stats["samples"]
    assert {r["host"] for r in rows} == {socket.gethostname()}
    assert {(r["gpu"], r["util_pct"]) for r in rows} == {(0, 70.0), (1, 30.0)}


@pytest.mark.parametrize("interval", [float("nan"), float("inf"), 0.0])
def test_an_interval_that_is_not_a_finite_number_of_seconds_is_refused(tmp_path, interval):
    with Recorder(str(tmp_path / "run")) as rec, pytest.raises(ValueError, match="finite number of seconds"):
        GpuSampler(rec, interval=interval, backend=lambda: FakeBackend(utils=[[50.0]]))
    assert main(["collect", "gpu", "--run-dir", str(tmp_path / "run"), "--interval", str(interval)]) == 2


def test_a_slow_read_skips_the_ticks_it_missed_rather_than_bursting(tmp_path):
    class SlowOnce(FakeBackend):
        def sample(self, index: int):
            if self.calls == 1:
                time.sleep(0.5)  # one read takes five intervals
            return super().sample(index)

    backend = SlowOnce(utils=[[50]])
    with Recorder(str(tmp_path / "run"), flush_interval=0.05) as rec:
        sampler = GpuSampler(rec, interval=0.1, backend=lambda: backend)
        assert sampler.start() and sampler.start()  # a second start keeps the one thread
        time.sleep(1.0)
        sampler.stop()
    times = sorted(r["time"] for r in RunReader(tmp_path / "run").read("gpu").to_pylist())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) <= 8  # ~10 ticks in 1 s less the ~4 the slow read spanned, not 10 with a burst
    assert min(gaps) > 0.05  # no catch-up ticks fired back to back
    assert sum(t.name == "rlscope-gpu-sampler" for t in threading.enumerate()) == 0


def test_a_sampler_starts_again_after_stop_and_a_hung_read_closes_the_library_when_it_returns(tmp_path, caplog):
    release = threading.Event()

    class Hangs(FakeBackend):
        hang = False

        def sample(self, index: int):
            if self.hang:
                release.wait(10)
            return super().sample(index)

    opened: list[Hangs] = []

    def open_backend() -> Hangs:
        opened.append(Hangs(utils=[[50]]))
        return opened[-1]

    with Recorder(str(tmp_path / "run"), flush_interval=0.05) as rec:
        sampler = GpuSampler(rec, interval=0.02, backend=open_backend)
        assert sampler.start()
        sampler.stop()
        assert opened[0].closed
        ticks = sampler.ticks
        assert sampler.start()  # stopped, it samples again
        backend = opened[1]
        time.sleep(0.2)
        assert sampler.ticks > ticks
        backend.hang = True
        time.sleep(0.1)  # a read is now stuck
        sampler.stop(timeout=0.1)
        assert not backend.closed  # closing NVML under a read that still runs could crash it
        with caplog.at_level(logging.WARNING, logger="rlscope"):
            assert sampler.start() is False
        assert "not restarted" in caplog.text
        release.set()
        deadline = time.monotonic() + 5
        while not backend.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.closed  # the thread closed it as its read returned

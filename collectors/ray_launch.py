"""One GPU sampler per node of a Ray cluster, each writing its own host's segments.

Ray is imported only when these functions are called (the ``ray`` extra). Each sampler
is a zero-CPU actor pinned to its node with a hard node-affinity strategy, so it reads
the GPUs of the node it runs on; segment names carry the host, so the actors never
collide in a shared run directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from rlscope.collectors.gpu_sampler import GpuSampler
from rlscope.collectors.nvml import GpuBackend, NvmlBackend
from rlscope.trace.recorder import Recorder

__all__ = ["start_gpu_samplers", "stop_gpu_samplers"]

log = logging.getLogger("rlscope")


class _SamplerActor:
    def __init__(
        self,
        run_dir: str,
        interval: float,
        role: str | Mapping[int, str],
        backend: Callable[[], GpuBackend],
        meta: Mapping[str, Any],
    ):
        self.host = socket.gethostname()
        self.recorder = Recorder(run_dir, meta=meta, flush_interval=max(1.0, interval * 4))
        self.sampler = GpuSampler(self.recorder, interval=interval, role=role, backend=backend)

    def start(self) -> tuple[str, bool]:
        return self.host, self.sampler.start()

    def stop(self) -> dict[str, Any]:
        self.sampler.stop()
        self.recorder.close()
        return {
            "host": self.host,
            "samples": self.sampler.samples,
            "errors": self.sampler.errors,
            **self.recorder.status(),
        }


def start_gpu_samplers(
    run_dir: str | os.PathLike[str],
    *,
    interval: float = 0.5,
    role: str | Mapping[int, str] = "unknown",
    backend: Callable[[], GpuBackend] = NvmlBackend,
    meta: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Start a sampler actor on every alive node; return the actor handles.

    Call after ``ray.init()``. Nodes without a readable GPU keep an idle actor (logged on
    that node). A node whose actor fails to start (rlscope not installed there, say) is
    logged here and left out, its actor killed: the list has one handle per node sampling
    or idle, and training goes on either way.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0)(_SamplerActor)
    started = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        handle = actor_cls.options(scheduling_strategy=strategy).remote(
            os.fspath(run_dir), interval, role, backend, dict(meta or {})
        )
        started.append((node["NodeID"], handle, handle.start.remote()))
    handles = []
    for node_id, handle, ref in started:
        try:
            ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - one node's failure must not stop the job or the others
            log.warning("rlscope GPU sampler on node %s did not start: %s", node_id, _first_line(exc))
            with contextlib.suppress(Exception):
                ray.kill(handle)
            continue
        handles.append(handle)
    return handles


def stop_gpu_samplers(handles: list[Any]) -> list[dict[str, Any]]:
    """Stop the actors' samplers, flush their recorders, and return their counters; a node
    that is gone gives ``{"error": ...}`` in its place rather than losing the others'."""
    import ray

    refs = [h.stop.remote() for h in handles]
    out = []
    for ref in refs:
        try:
            out.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001
            log.warning("rlscope GPU sampler did not stop cleanly: %s", _first_line(exc))
            out.append({"error": _first_line(exc)})
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"

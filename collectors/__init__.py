"""Collectors (installed as ``rlscope.collectors``): they only write the run directory.

The generic one is ``rlscope.Recorder``; framework-specific collectors (log importers,
the verl hook, the NVML sampler) live in this package, one module each.
"""

__all__: list[str] = []

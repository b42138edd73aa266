"""rlscope: see where the GPU time of RL post-training goes, priced, with what to change.

The run directory is the one source of truth: collectors write it (``Recorder`` for any
framework, the verl hook, log importers, the NVML sampler), and analyzers, ``rlscope
diagnose``, the dashboard and the Prometheus exporter read it. ``import rlscope`` stays
light: it never imports pynvml, dash or Ray.
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlscope.trace.reader import RunReader
    from rlscope.trace.recorder import Recorder

__all__ = ["Recorder", "RunReader", "__version__"]


def __getattr__(name: str) -> Any:
    """``Recorder`` and ``RunReader`` load pyarrow when first asked for, so that ``import
    rlscope`` (every ``rlscope`` command starts with it) is over at once, before a Ctrl-C
    could interrupt it with a traceback."""
    if name == "Recorder":
        from rlscope.trace.recorder import Recorder

        return Recorder
    if name == "RunReader":
        from rlscope.trace.reader import RunReader

        return RunReader
    raise AttributeError(f"module 'rlscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

# In a checkout, collectors/ and dashboards/ sit beside this package and are installed as
# rlscope.collectors and rlscope.dashboards (setuptools package-dir). Extending __path__
# makes the same names resolve when the code runs from the repository root uninstalled.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if all(
    _os.path.isfile(_os.path.join(_root, *parts))
    for parts in (("pyproject.toml",), ("collectors", "__init__.py"), ("dashboards", "__init__.py"))
):
    __path__.append(_root)

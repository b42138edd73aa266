"""Log importers: turn logs a verl run already wrote into an rlscope run directory.

One function per format, all of the same shape, ``import_X(sources, run_dir, *, strict,
tail, meta) -> ImportSummary``; ``IMPORTERS`` maps the CLI's format names to them. Every
importer streams its input in bounded memory, writes ``steps`` rows under verl's current
metric names (``rlscope.collectors.verl_metrics``), keeps each attempt of a step logged
again after a restart, says where each job a restart began (for an async run's pipeline
fills: ``StepSink``), and can follow a live file (``Tail(follow=True)``).
"""

from __future__ import annotations

from collections.abc import Callable

from rlscope.collectors.importers._sink import ImportSummary, StepSink
from rlscope.collectors.importers._source import ImportInputError, Tail, check_text_file
from rlscope.collectors.importers.tensorboard import import_tensorboard
from rlscope.collectors.importers.verl_jsonl import import_verl_jsonl
from rlscope.collectors.importers.verl_log import import_verl_log
from rlscope.collectors.importers.wandb_csv import import_wandb_csv

__all__ = [
    "IMPORTERS",
    "ImportInputError",
    "ImportSummary",
    "StepSink",
    "Tail",
    "check_text_file",
    "import_tensorboard",
    "import_verl_jsonl",
    "import_verl_log",
    "import_wandb_csv",
]

IMPORTERS: dict[str, Callable[..., ImportSummary]] = {
    "verl-log": import_verl_log,
    "verl-jsonl": import_verl_jsonl,
    "wandb-csv": import_wandb_csv,
    "tensorboard": import_tensorboard,
}

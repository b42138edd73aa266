"""One rule, three readers: which step records train.

A record trains when one of its values says something (finite, no stage timer below zero, no
share of time outside [0, 1]: docs/run-directory.md, "the readers drop values that say nothing")
and makes a step (``verl_metrics.makes_step``: no validation, checkpoint or profiling metric alone,
no step timer of zero). The analyzers (``diagnose``), the exporter and the importers each decide
it, and the job's first training record, a pipeline fill, must be the same step in all three.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from rlscope import Recorder
from rlscope.analyzers._data import RunFrames, usable_step_rows
from rlscope.collectors.importers.verl_log import import_verl_log
from rlscope.collectors.verl_metrics import holds_training, training_rows
from rlscope.exporter import RLScopeCollector
from rlscope.trace.reader import RunReader
from rlscope.trace.store import write_segment

# (the record job 2 logs first, whether it trains)
CASES = {
    "stage timer and loss": ({"timing_s/gen": 5.0, "actor/pg_loss": 0.1}, True),
    "no timer at all": ({"actor/pg_loss": 0.1}, True),
    "a negative loss (no timer)": ({"actor/pg_loss": -0.3}, True),
    "step timer": ({"timing_s/step": 9.0}, True),
    "validation alone": ({"val-core/acc": 0.5}, False),
    "validation and its testing timer": ({"val-core/acc": 0.5, "timing_s/testing": 3.0}, False),
    "checkpoint timer alone": ({"timing_s/save_checkpoint": 4.0}, False),
    "step timer of zero": ({"timing_s/step": 0.0}, False),
    "negative step timer": ({"timing_s/step": -2.0}, False),
    "NaN step timer": ({"timing_s/step": math.nan}, False),
    "inf step timer": ({"timing_s/step": math.inf}, False),
    "NaN stage timer": ({"timing_s/gen": math.nan}, False),
    "inf stage timer": ({"timing_s/gen": math.inf}, False),
    "-inf stage timer": ({"timing_s/gen": -math.inf}, False),
    "negative stage timer": ({"timing_s/gen": -1.0}, False),
    "negative stage timer, old name": ({"timing/gen": -1.0}, False),
    "validation and a NaN stage timer": ({"val-core/acc": 0.5, "timing_s/gen": math.nan}, False),
    "validation and a negative stage timer": ({"val-core/acc": 0.5, "timing_s/gen": -1.0}, False),
    "NaN loss": ({"actor/pg_loss": math.nan}, False),
    "idle ratio in [0, 1]": ({"fully_async/trainer/idle_ratio": 0.25}, True),
    "idle ratio within rounding of 1": ({"fully_async/trainer/idle_ratio": 1.0000005}, True),
    "idle ratio outside [0, 1]": ({"fully_async/trainer/idle_ratio": 1.5}, False),
    "idle ratio outside [0, 1], old name": ({"trainer/idle_ratio": 1.5}, False),
    "negative occupancy share": ({"dynamic_resource/rollout_resource_utilization": -0.5}, False),
    "NaN idle ratio": ({"fully_async/rollouter/idle_ratio": math.nan}, False),
    # seconds per token, logged in ms since: 1e306 s is inf ms, which says nothing
    "per-token time inf in its unit": ({"timing_per_token/gen": 1e306}, False),
}

_TRAINS = {"actor/pg_loss": 0.1, "timing_s/step": 10.0}
_T0 = 1_700_000_000.0


def _jobs(record: dict[str, float]) -> list[list[tuple[int, int, dict[str, float]]]]:
    """Job 1 trains steps 1-3; job 2 resumes from step 1's checkpoint and logs ``record`` first,
    at step 2, then trains step 3 again: its first training record is step 2's if ``record``
    trains, else step 3's (``(step, attempt, metrics)`` per record)."""
    return [[(1, 0, _TRAINS), (2, 0, _TRAINS), (3, 0, _TRAINS)], [(2, 1, record), (3, 1, _TRAINS)]]


def _fills(trains: bool) -> frozenset[int]:
    """The pipeline fills: the run's first training step and job 2's first."""
    return frozenset({1, 2 if trains else 3})


def _record_live(path: Path, record: dict[str, float]) -> None:
    """The run as a live run's store holds it: each record's rows at its time, each job's start."""
    with Recorder(path, {}):
        pass
    rows = [
        (step, attempt, _T0 + 100 * j + 10 * i, key, value)
        for j, job in enumerate(_jobs(record))
        for i, (step, attempt, metrics) in enumerate(job, 1)
        for key, value in metrics.items()
    ]
    step, attempt, when, key, value = (list(c) for c in zip(*rows, strict=True))
    table = pa.table(
        {
            "step": step,
            "attempt": pa.array(attempt, pa.int32()),
            "time": pa.array(when, pa.float64()),
            "key": key,
            "value": pa.array(value, pa.float64()),
        }
    )
    write_segment(path, "steps", table, writer_id="test", seq=1)
    write_segment(path, "jobs", pa.table({"time": pa.array([_T0, _T0 + 100], pa.float64())}), writer_id="j", seq=1)


@pytest.mark.parametrize(("record", "trains"), CASES.values(), ids=CASES.keys())
def test_the_analyzers_place_a_job_s_first_training_record_by_the_rule(tmp_path, record, trains):
    _record_live(tmp_path / "run", record)
    assert RunFrames.from_reader(RunReader(tmp_path / "run")).fills == _fills(trains)


@pytest.mark.parametrize(("record", "trains"), CASES.values(), ids=CASES.keys())
def test_the_exporter_places_a_job_s_first_training_record_by_the_rule(tmp_path, record, trains):
    _record_live(tmp_path / "run", record)
    registry = CollectorRegistry()
    collector = RLScopeCollector(tmp_path / "run", registry=registry, min_refresh_s=0)
    assert registry.get_sample_value("rlscope_last_step", {"run": "run"}) == 3.0  # read
    assert collector.states[0]._fills() == _fills(trains)


@pytest.mark.parametrize(("record", "trains"), CASES.values(), ids=CASES.keys())
def test_an_import_names_a_job_s_first_training_record_by_the_rule(tmp_path, record, trains):
    # a console log per job: no times, so the importer names job 2's first training record in meta.json
    sources = []
    for j, job in enumerate(_jobs(record)):
        lines = (" - ".join([f"step:{s}", *(f"{k}:{v!r}" for k, v in metrics.items())]) for s, _, metrics in job)
        sources.append(tmp_path / f"job{j}.log")
        sources[-1].write_text("".join(f"{line}\n" for line in lines))
    summary = import_verl_log(sources, tmp_path / "run")
    assert summary.restarts == 1
    reader = RunReader(tmp_path / "run")
    assert reader.meta["importer"]["job_first_steps"] == [[2, 1] if trains else [3, 1]]
    assert RunFrames.from_reader(reader).fills == _fills(trains)


def test_the_rule_over_rows_keyed_by_index_is_the_rule_per_record():
    # the cases' rows in one table, each key named once and indexed (as the analyzers and the
    # exporter pass them): a record trains when one of its rows does
    keys = sorted({key for record, _ in CASES.values() for key in record})
    rows = [(i, key, value) for i, (record, _) in enumerate(CASES.values()) for key, value in record.items()]
    of_record = np.array([i for i, _, _ in rows])
    trains = training_rows(keys, np.array([v for _, _, v in rows]), np.array([keys.index(k) for _, k, _ in rows]))
    assert [bool(trains[of_record == i].any()) for i in range(len(CASES))] == [t for _, t in CASES.values()]
    assert [holds_training(record) for record, _ in CASES.values()] == [t for _, t in CASES.values()]


def test_a_row_without_a_key_names_no_metric_and_says_nothing():
    # the steps table's key column is nullable: a row without a key is no metric, whatever its value,
    # and is neither renamed to another key nor read as one of its own
    steps = pa.table(
        {
            "step": [1, 1, 1],
            "attempt": pa.array([0, 0, 0], pa.int32()),
            "time": [_T0, _T0, _T0],
            "key": pa.array([None, "timing_s/gen", "timing_s/step"]).dictionary_encode(),
            "value": [0.5, 5.0, 9.0],
        }
    )
    rows = usable_step_rows(steps)
    assert sorted(zip(rows["key"], rows["value"], strict=True)) == [("timing_s/gen", 5.0), ("timing_s/step", 9.0)]
    assert usable_step_rows(steps.filter(pa.array([True, False, False]))).empty


@pytest.mark.parametrize("reader", ["analyzers", "exporter"])
def test_a_record_whose_only_row_has_no_key_does_not_train(tmp_path, reader):
    # job 2's first record holds one row without a key: no training, so its first training record is step 3's
    _record_live(tmp_path / "run", {None: 2.0})
    if reader == "analyzers":
        fills = RunFrames.from_reader(RunReader(tmp_path / "run")).fills
    else:
        registry = CollectorRegistry()
        collector = RLScopeCollector(tmp_path / "run", registry=registry, min_refresh_s=0)
        assert registry.get_sample_value("rlscope_last_step", {"run": "run"}) == 3.0  # read
        fills = collector.states[0]._fills()
    assert fills == _fills(False)

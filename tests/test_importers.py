"""Log importers: real verl logs, one synthetic fixture per messy case, follow mode, bad input."""

from __future__ import annotations

import _thread
import contextlib
import fcntl
import gzip
import io
import json
import logging
import math
import os
import pprint
import random
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from fully_async_log import aggregated, fully_async_records, rollouter_window, update_metrics
from resumed_async import LOGGED_JOBS, resumed_record

from rlscope import Recorder, RunReader
from rlscope.analyzers import RunFrames, drift
from rlscope.analyzers._data import wide_steps
from rlscope.cli import main as cli
from rlscope.collectors.importers import (
    ImportSummary,
    StepSink,
    Tail,
    import_tensorboard,
    import_verl_jsonl,
    import_verl_log,
    import_wandb_csv,
)
from rlscope.collectors.importers._source import MAX_LINE_BYTES, ImportInputError
from rlscope.collectors.verl_config import config_from_overrides
from rlscope.errors import RunDirError

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "logs"
# shared/ lies beside the repository (its checkout and CI's); RLSCOPE_REAL_LOGS points elsewhere
REAL = Path(os.environ.get("RLSCOPE_REAL_LOGS", Path(__file__).resolve().parents[2] / "shared" / "real_logs"))


@pytest.fixture(autouse=True)
def _restore_rlscope_logger():
    """``rlscope.cli.main`` gives the "rlscope" logger its own stderr handler and turns propagation
    off; undo that after each test so that caplog in other test modules still sees records."""
    logger = logging.getLogger("rlscope")
    handlers, propagate, level = logger.handlers[:], logger.propagate, logger.level
    yield
    logger.handlers[:] = handlers
    logger.propagate = propagate
    logger.setLevel(level)


def steps(run: Path) -> pd.DataFrame:
    return RunReader(run).read("steps").to_pandas()


def value(df: pd.DataFrame, step: int, key: str, attempt: int = 0) -> float:
    rows = df[(df.step == step) & (df.key == key) & (df.attempt == attempt)]
    assert len(rows) == 1, f"step {step} attempt {attempt} {key}: {len(rows)} rows"
    return float(rows.value.iloc[0])


def import_lines(tmp_path: Path, *lines: str) -> tuple[ImportSummary, pd.DataFrame]:
    """Import ``lines`` as one verl console log, strictly: the summary and the steps written."""
    log = tmp_path / "console.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    summary = import_verl_log([log], tmp_path / "run", strict=True)
    return summary, steps(tmp_path / "run")


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli(["import", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# -- real logs -----------------------------------------------------------------------------


def real_log(name: str) -> Path:
    path = REAL / f"{name}.log"
    if not path.is_file():
        pytest.skip(f"real logs not found at {REAL} (set RLSCOPE_REAL_LOGS)")
    return path


def test_real_rllm_issue_log_with_a_line_broken_mid_token(tmp_path):
    summary = import_verl_log([real_log("07_rllm54_zero_reward_step4")], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert set(df.step) == {4} and len(df) == 47 and summary.values == 47
    assert value(df, 4, "timing_s/gen") == 100.108
    assert value(df, 4, "timing_s/step") == 131.608
    assert value(df, 4, "timing_s/adv") == 11.197
    assert value(df, 4, "prompt_length/max") == 397.0  # "prompt_length/max" + newline + ":397.000"
    assert value(df, 4, "prompt_length/min") == 36.0
    assert value(df, 4, "perf/mfu/actor") == 0.387  # logged as mfu/actor
    assert value(df, 4, "batch/solve_none") == 128.0


def test_real_charcount_console_log(tmp_path):
    summary = import_verl_log([real_log("12_charcount_grpo_smollm135m_1gpu")], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert sorted(set(df.step)) == [0, 1]
    # step 0 is validation only; the pprint-ed "Initial validation metrics" repeats it and is dropped
    assert set(df[df.step == 0].key) == {k for k in df[df.step == 0].key if k.startswith(("val-core/", "val-aux/"))}
    assert len(df[df.step == 0]) == 13 and summary.skipped == {"duplicate_of_step_line": 1}
    assert value(df, 0, "val-aux/char_count/reward/mean@1") == 0.121524201853759
    assert value(df, 1, "timing_s/step") == 48.7025266494602
    assert value(df, 1, "timing_s/gen") == 16.22749171219766
    assert value(df, 1, "timing_s/update_actor") == 21.522068275138736
    assert value(df, 1, "timing_s/old_log_prob") == 10.275943230837584
    assert value(df, 1, "timing_s/reward") == 0.42415859922766685
    assert value(df, 1, "perf/throughput") == 3283.320414789452
    assert value(df, 1, "global_seqlen/min") == 159906
    assert value(df, 1, "actor/lr") == 1e-06
    assert df.attempt.eq(0).all() and df.time.isna().all()


def test_real_tinyzero_snippets(tmp_path):
    import_verl_log([real_log("15_tinyzero_countdown_ppo_4090")], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert sorted(set(df.step)) == [2, 52, 92, 122]
    expected = {2: (5.093, 8.991), 52: (5.041, 8.858), 92: (4.192, 7.891), 122: (4.860, 8.635)}
    for step, (gen, total) in expected.items():
        assert value(df, step, "timing_s/gen") == gen
        assert value(df, step, "timing_s/step") == total
    assert value(df, 2, "actor/reward_kl_penalty") == -0.001  # TinyZero's critic/kl
    assert value(df, 2, "critic/vf_explained_var") == -4866.827
    assert value(df, 2, "perf/mfu/actor") == pytest.approx(value(df, 52, "perf/mfu/actor"), abs=1)


def test_real_quickstart_old_key_scheme(tmp_path):
    summary = import_verl_log([real_log("19_verl_quickstart_doc_oldformat")], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert sorted(set(df.step)) == [0, 1]
    assert value(df, 0, "timing_s/gen") == 21.47
    assert value(df, 0, "timing_s/ref") == 4.36
    assert value(df, 0, "timing_s/values") == 5.8
    assert value(df, 0, "timing_s/update_critic") == 15.664
    assert value(df, 0, "timing_s/update_actor") == 20.314
    assert value(df, 0, "actor/lr") == pytest.approx(1e-6)  # actor/lr(1e-4):0.010
    assert value(df, 0, "critic/lr") == pytest.approx(1e-5)
    assert value(df, 1, "timing_s/gen") == 23.02
    # step 1 logs actor/reward_kl_penalty twice: the first value is kept
    assert value(df, 1, "actor/reward_kl_penalty") == 0.0 and summary.skipped == {"duplicate_key": 1}
    assert not df.key.str.startswith("timing/").any()
    meta = RunReader(tmp_path / "run").meta
    assert meta["framework"] == "verl" and meta["importer"]["name"] == "verl-log"
    assert meta["importer"]["sources"] == [str(real_log("19_verl_quickstart_doc_oldformat").resolve())]
    assert meta["importer"]["renamed_keys"]["timing/gen"] == "timing_s/gen"


def test_a_skip_names_where_it_first_happened(tmp_path):
    # the quickstart's line 2 (step:1) logs actor/reward_kl_penalty twice; without the place a
    # user cannot tell which key lost a value, and --strict does not stop on a repeated key
    log = real_log("19_verl_quickstart_doc_oldformat")
    summary = import_verl_log([log], tmp_path / "run")
    first = f"{log}:2: actor/reward_kl_penalty"
    assert "  skipped: 1 duplicate_key (first at " + first + ")" in str(summary).splitlines()
    assert RunReader(tmp_path / "run").meta["importer"]["skipped_first"] == {"duplicate_key": first}


@pytest.mark.parametrize("logger", ["jsonl", "log", "tensorboard", "wandb"])
def test_two_names_of_one_metric_in_a_record_name_the_record_s_place(tmp_path, logger):
    # verl's old and current name of the generation timer in one record (a logger that kept both):
    # one value is lost, and the skip says where, in the place format of every other skip, not the
    # key alone, which names no place
    records = [
        (1, {"timing/gen": 5.0, "timing_s/gen": 6.0, "timing_s/step": 10.0}),
        (2, {"timing_s/gen": 5.0, "timing_s/step": 10.0}),
    ]
    source = _fully_async_export(tmp_path, records, logger)
    importer = {"jsonl": import_verl_jsonl, "log": import_verl_log, "tensorboard": import_tensorboard}
    summary = importer.get(logger, import_wandb_csv)([source], tmp_path / "run")
    place = {  # the record's line (a W&B export's first row is line 2, under its header); an event file
        "jsonl": f"{source}:1",
        "log": f"{source}:1",
        "tensorboard": f"{source / 'proj' / 'exp' / 'events.out.tfevents.1700000000.host.1.0'}",
        "wandb": f"{source}:2",
    }[logger]
    assert summary.skipped == {"duplicate_key": 1}
    assert summary.skipped_first == {"duplicate_key": f"{place}: timing_s/gen"}


def test_real_charcount_log_states_batch_gpus_and_model_size(tmp_path):
    # the source notes: 1 GPU, train_batch_size 128, rollout.n 8, max response 128, SmolLM2-135M
    summary = import_verl_log([real_log("12_charcount_grpo_smollm135m_1gpu")], tmp_path / "run")
    meta = RunReader(tmp_path / "run").meta
    assert meta["batch_size"] == 128 and meta["group_size"] == 8 and meta["max_response_length"] == 128
    assert meta["gpu"] == {"count": 1}
    assert meta["model"] == {"name": "./models/merged_hf_model", "active_params": 134.52e6}
    assert meta["config"]["adv_estimator"] == "grpo" and meta["config"]["rollout_name"] == "vllm"
    assert "meta.json from the log: batch_size 128, group_size 8" in str(summary)


# -- synthetic fixtures, one per messy case ---------------------------------------------------


def test_ansi_colours_ray_prefixes_and_quotes(tmp_path):
    import_verl_log([DATA / "ansi_ray.log"], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    gens = {s: value(df, s, "timing_s/gen") for s in range(1, 7)}
    assert gens == {1: 12.5, 2: 13.25, 3: 14.0, 4: 15.0, 5: 16.0, 6: 17.0}
    # then a restart whose colour codes lost their ESC byte ("[36m", as pasted into an issue)
    assert value(df, 1, "timing_s/gen", attempt=1) == 2.5
    assert value(df, 6, "timing_s/step") == 25.5  # the closing backtick is not part of the value
    assert value(df, 2, "actor/pg_loss") == -0.02


def test_crlf_and_tqdm_bars_on_metric_lines(tmp_path):
    import_verl_log([DATA / "crlf_tqdm.log"], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert [value(df, s, "timing_s/step") for s in (1, 2, 3)] == [10.0, 10.5, 11.0]
    assert [value(df, s, "timing_s/gen") for s in (1, 2, 3)] == [5.5, 6.5, 7.5]


def test_lines_hard_wrapped_mid_token_are_joined(tmp_path):
    summary = import_verl_log([DATA / "wrapped.log"], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.skipped == {} and len(df) == 30  # 10 fields in each of three lines
    assert value(df, 1, "timing_s/step") == 48.7025266494602  # wrapped at 80 columns
    assert value(df, 1, "actor/entropy") == 0.09767807275056839  # split inside the number
    assert value(df, 2, "timing_s/old_log_prob") == 10.275943230837584  # wrapped at 97 columns
    assert value(df, 3, "timing_s/step") == 31.25  # "31.2" + newline + "5"
    assert value(df, 3, "critic/lr") == pytest.approx(1e-5)


WRAP_LINE = (
    "(TaskRunner pid=5) step:7 - global_seqlen/min:159906 - actor/entropy:0.09767807275056839 - "
    "actor/pg_loss:-0.0036091046008680547 - critic/lr(1e-4):0.100 - training/global_step:7 - "
    "timing_s/gen:16.22749171219766 - timing_s/step:48.7025266494602 - perf/throughput:3283.320414789452"
)


def _wrapped_values(tmp_path: Path, text: str) -> dict[str, float]:
    run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    (run.parent / f"{run.name}.log").write_text(f"(TaskRunner pid=5) Training\n{text}\n(WorkerDict pid=6) next\n")
    import_verl_log([run.parent / f"{run.name}.log"], run)
    df = steps(run)
    assert set(df.step) == {7}
    return dict(zip(df.key, df.value, strict=True))


def test_a_wrap_anywhere_in_a_metric_line_is_undone(tmp_path):
    expected = _wrapped_values(tmp_path, WRAP_LINE)
    assert len(expected) == 8 and expected["training/global_step"] == 7
    for width in range(7, 200, 9):  # a terminal of that many columns
        pieces = [WRAP_LINE[i : i + width] for i in range(0, len(WRAP_LINE), width)]
        assert _wrapped_values(tmp_path, "\n".join(pieces)) == expected, width
    inside = [*range(20, 25), WRAP_LINE.index("global_step") + 7]  # "s|tep:7", "global_|step:7"
    for cut in [*inside, *range(19, len(WRAP_LINE), 11)]:  # one break anywhere
        assert _wrapped_values(tmp_path, f"{WRAP_LINE[:cut]}\n{WRAP_LINE[cut:]}") == expected, cut


@pytest.mark.parametrize(
    "between",
    ["", "0.5\n", "--------------------------------\nTarget: 5 | Numbers: [1, 2]\n", "step:1.5 - a:9 - b:9\n"],
    ids=["elided-value", "a-number-that-does-not-continue-it", "a-rule-and-free-text", "a-step-that-is-no-integer"],
)
def test_a_step_line_is_never_swallowed_by_the_one_before(tmp_path, between):
    # without Ray prefixes nothing marks a process's lines: an odd end of one step line (an
    # elided value, a stray number, a rule of dashes) must not join the next step's line to it
    last = {"": "b:2 ...", "0.5\n": "b:8.991"}.get(between, "b:2")  # 8.991 and 0.5 make no number
    log = tmp_path / "x.log"
    log.write_text(f"step:1 - a:1 - {last}\n{between}step:2 - a:3 - b:4\nstep:3 - a:5 - b:6\n")
    summary = import_verl_log([log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert [value(df, s, "a") for s in (1, 2, 3)] == [1.0, 3.0, 5.0]
    assert [value(df, s, "b") for s in (2, 3)] == [4.0, 6.0]
    assert set(df[df.step == 1].key) == ({"a"} if not between else {"a", "b"})
    if between:
        assert value(df, 1, "b") == float(last[2:])
    bad = {"": {"bad_value": 1}, "step:1.5 - a:9 - b:9\n": {"bad_step": 1}}  # "b:2 ...", "step:1.5"
    assert summary.skipped == bad.get(between, {})


def test_a_last_line_without_its_line_end_loses_its_last_field_and_is_told(tmp_path, capsys):
    log = tmp_path / "copied.log"
    log.write_bytes(b"step:1 - a:1.5\nstep:2 - a:2.5 - timing_s/step:13")  # copied mid-write: 131.608?
    code, out, _ = run_cli(capsys, "verl-log", log, "--out", tmp_path / "run")
    df = steps(tmp_path / "run")
    assert code == 0 and value(df, 2, "a") == 2.5 and set(df[df.step == 2].key) == {"a"}
    assert "skipped: 1 cut_off_field" in out
    note = (
        f"{log}:2: this step line ends the file without a line end (copied while being written?); "
        "its last field, 'timing_s/step:13', may be cut off and was left out"
    )
    assert f"note: {note}" in out
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["importer"]["notes"] == [note]
    log.write_bytes(b"step:1 - a:1.5\n")
    assert import_verl_log([log], tmp_path / "whole").notes == []


def test_a_cut_off_last_line_of_a_wrapped_step_line_loses_its_last_field(tmp_path):
    log = tmp_path / "wrapped.log"
    log.write_bytes(b"step:3 - a:1.5 - timing_s/gen:10\n0.5 - timing_s/step:13")  # wrapped, then cut
    summary = import_verl_log([log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 3, "timing_s/gen") == 100.5 and set(df.key) == {"a", "timing_s/gen"}
    assert summary.skipped == {"cut_off_field": 1}


def test_a_cut_off_last_jsonl_line_is_told_not_bad(tmp_path):
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_bytes(b'{"step": 1, "data": {"a": 1.5}}\n{"step": 2, "data": {"a": 2')
    summary = import_verl_jsonl([jsonl], tmp_path / "run", strict=True)
    assert sorted(set(steps(tmp_path / "run").step)) == [1] and summary.skipped == {"cut_off_field": 1}
    jsonl.write_bytes(b'{"step": 1, "data": {"a": 1.5}}\n{"step": 2, "data": {"a": 2.5}}')  # whole, no line end
    import_verl_jsonl([jsonl], tmp_path / "whole", strict=True)
    assert value(steps(tmp_path / "whole"), 2, "a") == 2.5


def test_a_cut_off_last_csv_row_loses_its_last_cell(tmp_path):
    csv_file = tmp_path / "history.csv"
    csv_file.write_bytes(b"_step,a,timing_s/step\n1,1.5,131.608\n2,2.5,13")
    summary = import_wandb_csv([csv_file], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 1, "timing_s/step") == 131.608 and value(df, 2, "a") == 2.5
    assert set(df[df.step == 2].key) == {"a"} and "its last cell may be cut off, so it was left out" in summary.notes[0]
    assert summary.skipped == {"cut_off_field": 1}
    csv_file.write_bytes(b"a,_step\n1.5,1\n2.5,2")  # the step itself may be cut short: the row goes
    summary = import_wandb_csv([csv_file], tmp_path / "step-last", strict=True)
    assert sorted(set(steps(tmp_path / "step-last").step)) == [1] and summary.skipped == {"cut_off_field": 1}
    assert "so the row was left out" in summary.notes[0]


@pytest.mark.parametrize("rest", ['5"', "5'", '5",', '5\\n"', "5 ,"])
def test_a_number_wrapped_before_a_closing_quote_is_joined_back(tmp_path, rest):
    # a quoted log line ("... a/y:31.25") wrapped inside its last number, the quote and a
    # comma or an escaped line end after it
    log = tmp_path / "x.log"
    log.write_text(f"step:1 - timing_s/gen:10.0 - a/y:31.2\n{rest}\nstep:2 - a/y:15.0\n")
    summary = import_verl_log([log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 1, "a/y") == 31.25 and value(df, 2, "a/y") == 15.0 and summary.skipped == {}


@pytest.mark.parametrize(
    ("digits", "step"),
    [("0" * 22 + "5", 5), ("0" * 5000 + "5", 5), ("9" * 5000, None), ("9" * 19, None), ("-3", None)],
)
def test_a_step_number_of_many_digits_is_read_or_skipped_never_raised(tmp_path, digits, step):
    log = tmp_path / "x.log"
    log.write_text(f"step:1 - a/b:2.0\nstep:{digits} - a/b:1.0\n")  # a skipped step is no restart
    summary = import_verl_log([log], tmp_path / "run")
    expected = sorted({1} | ({step} if step is not None else set()))
    assert sorted(set(steps(tmp_path / "run").step)) == expected
    assert summary.skipped == ({} if step is not None else {"bad_step": 1}) and summary.restarts == 0


def test_a_jsonl_integer_past_float_range_is_infinite_not_a_crash(tmp_path):
    path = tmp_path / "big.jsonl"
    huge = "1" + "0" * 5000  # past int()'s 4,300 digits too
    path.write_text(
        '{"step": 1, "data": {"a/b": 1}}\n'
        f'{{"step": 2, "data": {{"a/b": {huge}, "a/c": -{huge}, "a/d": 2, "a/e": {huge[:400]}}}}}\n'
        '{"step": 3, "data": {"a/b": 3}}\n'
    )
    summary = import_verl_jsonl([path], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert summary.steps == 3 and value(df, 2, "a/b") == math.inf and value(df, 2, "a/c") == -math.inf
    assert value(df, 2, "a/d") == 2 and value(df, 3, "a/b") == 3 and value(df, 2, "a/e") == math.inf


def test_a_dict_of_plain_keys_is_someone_s_print_not_verl_metrics(tmp_path):
    lines = []
    for s in (1, 2, 3):
        lines += [
            f"(TaskRunner pid=1) sample {i} reward metrics: {{'acc': {i % 2}.0, 'format_ok': 1.0}}" for i in range(3)
        ]
        lines.append(f"(TaskRunner pid=1) step:{s} - critic/score/mean:0.5 - timing_s/step:10.0")
    lines.append("(TaskRunner pid=1) Final validation metrics: {'val-core/gsm8k/acc': 0.25, 'note': 2.0}")
    log = tmp_path / "x.log"
    log.write_text("\n".join(lines) + "\n")
    summary = import_verl_log([log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert summary.restarts == 0 and sorted(set(df.step)) == [1, 2, 3]
    assert set(df.key) == {"critic/score/mean", "timing_s/step", "val-core/gsm8k/acc", "note"}


@pytest.mark.parametrize(
    ("importer", "text"),
    [
        ("verl-log", "step:1 - a:1\nstep:12345678901234567890 - a:3\nstep:2 - a:2\n"),
        (
            "verl-jsonl",
            '{"step": 1, "data": {"a": 1}}\n{"step": 1e30, "data": {"a": 3}}\n{"step": 2, "data": {"a": 2}}\n',
        ),
        ("wandb-csv", "_step,a\n1,1\n1e30,3\n2,2\n"),
    ],
)
def test_a_step_number_past_int64_is_skipped_not_a_crash(tmp_path, importer, text):
    from rlscope.collectors.importers import IMPORTERS

    source = tmp_path / "in.txt"
    source.write_text(text)
    summary = IMPORTERS[importer]([source], tmp_path / "run")
    assert sorted(set(steps(tmp_path / "run").step)) == [1, 2] and sum(summary.skipped.values()) == 1


def test_odd_values_free_text_and_repeated_keys(tmp_path):
    summary = import_verl_log([DATA / "values.log"], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 1, "a/np") == 0.5 and value(df, 1, "a/int") == 3
    assert math.isnan(value(df, 1, "a/nan"))
    assert value(df, 1, "a/inf") == math.inf and value(df, 1, "a/neginf") == -math.inf
    assert value(df, 1, "a/sci") == 1e-06 and value(df, 1, "a/SCI") == 320.0
    assert value(df, 1, "a/bool") == 1.0 and value(df, 1, "a/neg") == -0.25
    assert value(df, 1, "critic/lr") == pytest.approx(1e-5)
    assert value(df, 1, "a/dup") == 1.0
    assert value(df, 4, "a/np") == 0.25
    assert summary.skipped == {
        "bad_value": 2,  # "note: resumed from checkpoint", "a/text:abc"
        "free_text_field": 1,  # "epoch 3"
        "duplicate_key": 1,
        "bad_step": 1,  # "step:two - a/x:1.0"
        "empty_step_line": 1,  # "step:3"
    }


def test_strict_names_the_first_unreadable_metric_line(tmp_path, capsys):
    code, _, err = run_cli(capsys, "verl-log", DATA / "values.log", "--out", tmp_path / "run", "--strict")
    assert code == 1
    assert err == f"rlscope: {DATA / 'values.log'}:1: bad value: note: resumed from checkpoint\n"


def test_strict_says_what_an_earlier_segment_wrote(tmp_path, capsys):
    # 1,100 steps of 50 keys: a segment of 50,000 rows (steps 1..1000) is on disk when step 1101 fails
    log = tmp_path / "strict.log"
    fields = " - ".join(f"a/k{i}:1.0" for i in range(50))
    log.write_text("".join(f"step:{s} - {fields}\n" for s in range(1, 1101)) + "step:1101 - a/b:oops\n")
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "run", "--strict")
    assert code == 1
    assert err == (
        f"rlscope: {log}:1101: bad value: a/b:oops (steps up to 1000 were written to {tmp_path / 'run'} before it)\n"
    )
    assert sorted(set(steps(tmp_path / "run").step)) == list(range(1, 1001))


def test_pretty_printed_validation_dicts(tmp_path):
    summary = import_verl_log([DATA / "validation_dicts.log"], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    # "Initial validation metrics" (split over quoted lines, a worker line in between) before step 1
    assert value(df, 0, "val-core/gsm8k/acc/mean@1") == 0.25
    assert value(df, 0, "val-aux/gsm8k/reward/mean@1") == 0.5
    # "Final validation metrics" repeats step 2's value and adds one
    assert value(df, 2, "val-core/gsm8k/acc/mean@1") == 0.75
    assert value(df, 2, "val-aux/gsm8k/reward/mean@1") == 0.625
    # a bare dict of metric keys before step 3; the config dump is not read as metrics
    assert value(df, 2, "val-core/math/acc/std@1") == 0.1
    assert not df.key.str.contains("lr|ppo_epochs|total_epochs").any()
    # pprint(metrics) after step 3's line repeats it: not a second attempt of step 3
    assert df.attempt.eq(0).all() and summary.restarts == 0
    assert summary.skipped == {"duplicate_of_step_line": 1} and value(df, 4, "timing_s/gen") == 13.0


@pytest.mark.parametrize("timer", ["", " - timing_s/testing:1.5"], ids=["untimed", "timed"])
def test_verl_0_1_final_validation_goes_under_the_step_that_logs_it(tmp_path, timer):
    # verl <= 0.2 and TinyZero raise global_steps, print the final validation, then log it at the
    # next step: the value belongs to step 3 alone, not also to step 2 (which did not validate);
    # the console line rounds to 3 decimals, the printed dict keeps its digits. A validation
    # timer on that line trains nothing: still the final validation's own line
    summary, df = import_lines(
        tmp_path,
        "(main_task pid=1) step:2 - timing_s/gen:5.041 - timing_s/step:8.858 - critic/score/mean:0.035",
        "(main_task pid=1) \"Final validation metrics: {'val/test_score/countdown': 0.0390625}\"",
        f"(main_task pid=1) step:3 - val/test_score/countdown:0.039{timer}",
    )
    assert df[df.key == "val/test_score/countdown"][["step", "value"]].values.tolist() == [[3, 0.0390625]]
    assert summary.restarts == 0 and summary.skipped == {"duplicate_of_step_line": 1}


def test_a_final_validation_whose_own_step_line_never_came_stays_with_its_run(tmp_path):
    # the log of the first run ends (cut, or crashed) before TinyZero's step:3 validation line,
    # and a restarted run begins: the score is of the trained model, at step 2, not step 0
    first, second = tmp_path / "fin1.log", tmp_path / "fin2.log"
    first.write_text(
        "(main_task pid=1) step:1 - timing_s/step:8.0 - critic/score/mean:0.02\n"
        "(main_task pid=1) step:2 - timing_s/step:8.5 - critic/score/mean:0.035\n"
        "(main_task pid=1) \"Final validation metrics: {'val/test_score/countdown': 0.0390625}\"\n"
    )
    second.write_text(
        "(main_task pid=9) step:1 - timing_s/step:8.1 - critic/score/mean:0.02\n"
        "(main_task pid=9) step:2 - timing_s/step:8.4 - critic/score/mean:0.03\n"
    )
    summary = import_verl_log([first, second], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    val = df[df.key == "val/test_score/countdown"]
    assert val[["step", "attempt", "value"]].values.tolist() == [[2, 0, 0.0390625]]
    assert sorted(set(df.step)) == [1, 2] and summary.restarts == 1


def test_a_resumed_runs_initial_validation_timed_on_its_line_goes_under_that_step(tmp_path):
    # resumed from step 2's checkpoint: the printed dict and the line after it are one validation
    # of step 2 (the line times it, trains nothing), not of the weights before step 2
    summary, df = import_lines(
        tmp_path,
        "(main_task pid=1) \"Initial validation metrics: {'val-core/a': 0.5, 'val-aux/b': 0.25}\"",
        "(main_task pid=1) step:2 - val-core/a:0.5 - timing_s/testing:3.0",
        "(main_task pid=1) step:3 - timing_s/step:8.0",
    )
    val = df[df.key.str.startswith("val")]
    assert sorted(val[["step", "key"]].values.tolist()) == [[2, "val-aux/b"], [2, "val-core/a"]]
    assert summary.restarts == 0 and df.attempt.eq(0).all()


def test_fully_async_late_timed_validation_is_not_a_restart(tmp_path):
    # a validation logged late, after the next step's training, with its timer: no restart
    summary, df = import_lines(
        tmp_path,
        "step:1 - timing_s/gen:5.0 - timing_s/step:9.0",
        "step:2 - timing_s/gen:5.5 - timing_s/step:9.5",
        "step:1 - val-core/x:0.4 - timing_s/testing:2.0",
        "step:3 - timing_s/gen:6.0 - timing_s/step:10.0",
    )
    assert summary.restarts == 0 and df.attempt.eq(0).all()
    assert value(df, 1, "timing_s/testing") == 2.0 and value(df, 1, "timing_s/step") == 9.0


def _fully_async_export(tmp_path: Path, records: list[tuple[int, dict]], logger: str) -> Path:
    """verl's file logger (a line per Tracking.log), its console logger (the same, as ``step:N -
    key:value`` lines), TensorBoard (an event per call) or a W&B history export (a row per step:
    the step's records merged, as wandb.log merges calls of one step)."""
    if logger == "jsonl":
        path = tmp_path / "metrics.jsonl"
        path.write_text("".join(json.dumps({"step": step, "data": data}) + "\n" for step, data in records))
        return path
    if logger == "log":
        path = tmp_path / "console.log"
        lines = (" - ".join([f"step:{step}", *(f"{k}:{v!r}" for k, v in data.items())]) for step, data in records)
        path.write_text("".join(f"{line}\n" for line in lines))
        return path
    if logger == "tensorboard":
        folder = tmp_path / "tensorboard_log" / "proj" / "exp"
        folder.mkdir(parents=True)
        events = [(step, 1700000000.0 + i, data) for i, (step, data) in enumerate(records)]
        write_events(folder, "events.out.tfevents.1700000000.host.1.0", events)
        return tmp_path / "tensorboard_log"
    rows: dict[int, dict] = {}
    for step, data in records:
        rows.setdefault(step, {"_step": step}).update(data)
    path = tmp_path / "history.csv"
    pd.DataFrame(list(rows.values())).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("logger", ["jsonl", "wandb", "tensorboard"])
@pytest.mark.parametrize(("sync_every", "trained"), [(1, {1: [1], 2: [2], 3: [3]}), (2, {1: [1], 2: [2, 3]})])
def test_fully_async_training_records_go_under_their_update_not_the_next_sync(tmp_path, logger, sync_every, trained):
    # the fully async trainer's Tracking.log calls (fully_async_log), as verl's loggers keep them;
    # TensorBoard splits the training record at the window's utilization it repeats: no restart
    records = fully_async_records(4, sync_every=sync_every)
    source = _fully_async_export(tmp_path, records, logger)
    importer = {"jsonl": import_verl_jsonl, "wandb": import_wandb_csv, "tensorboard": import_tensorboard}[logger]
    summary = importer([source], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.restarts == 0 and df.attempt.eq(0).all() and summary.steps == max(s for s, _ in records)
    for step, own in trained.items():
        assert value(df, step, "timing_s/step") == sum(update_metrics(u, 0)["timing_s/step"] for u in own)
        assert value(df, step, "training/global_step") == own[-1]
    for step in range(1, summary.steps + 1):  # the rollouter's window of update ``step``
        window = rollouter_window(step)
        idle = window["fully_async/rollouter/idle_ratio"]  # TensorBoard keeps float32
        assert value(df, step, "fully_async/rollouter/idle_ratio") == pytest.approx(idle)
        utilization = df[(df.step == step) & (df.key == "dynamic_resource/rollout_resource_utilization")].value
        assert list(utilization) == pytest.approx([1 - idle] * len(utilization)) and len(utilization)
    assert value(df, 2, "val-core/acc") == pytest.approx(0.02)


_IMPORTERS = {"jsonl": import_verl_jsonl, "log": import_verl_log, "tensorboard": import_tensorboard}


@pytest.mark.parametrize("logger", ["jsonl", "log", "tensorboard"])
@pytest.mark.parametrize(("updates", "sync_every"), [(3, 1), (2, 2), (6, 2)])
def test_fully_async_final_window_after_the_last_update_is_no_restart_and_replaces_nothing(
    tmp_path, logger, updates, sync_every
):
    # the queue ends right after the sync to version 3 (or 1), not due for validation: fit() syncs
    # it once more, logging a second window under it (after the last update), then that update's record
    records = fully_async_records(updates, sync_every=sync_every, test_freq=2)
    last = updates // sync_every
    assert records[-2] == (last, rollouter_window(last, last=True))
    summary = _IMPORTERS[logger]([_fully_async_export(tmp_path, records, logger)], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.restarts == 0 and df.attempt.eq(0).all() and summary.steps == last
    assert summary.skipped == {"fully_async_final_window": 1}
    # where the window left out was read: the line before the last (the export's a line per record)
    source = tmp_path / ("metrics.jsonl" if logger == "jsonl" else "console.log")
    place = f"{source}:{len(records) - 1}"
    if logger == "tensorboard":
        place = str(tmp_path / "tensorboard_log" / "proj" / "exp" / "events.out.tfevents.1700000000.host.1.0")
    assert summary.skipped_first == {"fully_async_final_window": place}
    wide = wide_steps(df)
    for step in range(1, last + 1):  # each step keeps the rollouter's window of its own update
        idle = rollouter_window(step)["fully_async/rollouter/idle_ratio"]
        assert wide.loc[step, "fully_async/rollouter/idle_ratio"] == pytest.approx(idle)
        # not the final window's utilization, which the last update's record repeats
        assert wide.loc[step, "dynamic_resource/rollout_resource_utilization"] == pytest.approx(1 - idle)
    # the last update's record, logged after the final window (a sync every 2: it replaces the
    # record of updates 4 and 5 at step 3, as the hook's last value does)
    assert wide.loc[last, "training/global_step"] == updates
    assert wide.loc[last, "timing_s/step"] == update_metrics(updates, 0)["timing_s/step"]


_UTILIZATION = "dynamic_resource/rollout_resource_utilization"  # the window's, which the trainer's record repeats


def _resumed(first: list[tuple[int, dict]], again: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """A run that crashed after ``first`` and was resumed, logging ``again`` (its first record a
    rollouter window of the last step ``first`` logged: a different window, idle 0.75)."""
    step, window = again[0]
    return [*first, (step, {**window, "fully_async/rollouter/idle_ratio": 0.75}), *again[1:]]


@pytest.mark.parametrize("logger", ["jsonl", "log"])
@pytest.mark.parametrize(
    "records",
    [
        # a sync per update: crashed after the sync to version 3; resumed from version 2, the
        # sync to 3 again (the aggregator empty: no record), to 4, then update 3's record, late
        _resumed(
            fully_async_records(3)[:-2],
            [
                (3, rollouter_window(3)),
                (4, rollouter_window(4)),
                (4, {"rollouter/validate_time": 3.0, "val-core/acc": 0.04}),
                (4, aggregated([update_metrics(3, 2)], rollouter_window(4)[_UTILIZATION])),
            ],
        ),
        # a sync every 2 updates (test_freq 3): crashed after the sync to version 2; resumed from
        # version 1 at global step 3 (1 * 2 + 1): the sync to 2 again, then updates 3's record
        # under 2, the same global step as the one logged there before: no final window
        _resumed(
            fully_async_records(4, sync_every=2, test_freq=3)[:-2],
            [(2, rollouter_window(2)), (2, aggregated([update_metrics(3, 1)], rollouter_window(2)[_UTILIZATION]))],
        ),
    ],
    ids=["sync-each-update", "sync-every-2"],
)
def test_fully_async_resume_that_first_logs_the_window_of_the_last_step_is_a_restart(tmp_path, logger, records):
    summary = _IMPORTERS[logger]([_fully_async_export(tmp_path, records, logger)], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    step = max(s for s, data in records if data.get("fully_async/rollouter/idle_ratio") == 0.75)
    assert summary.restarts == 1 and "fully_async_final_window" not in summary.skipped
    assert value(df, step, "fully_async/rollouter/idle_ratio", attempt=1) == 0.75
    assert wide_steps(df).loc[step, "fully_async/rollouter/idle_ratio"] == 0.75
    assert wide_steps(df).loc[step, "training/global_step"] == 3  # the resumed run's update 3


@pytest.mark.parametrize("logger", ["jsonl", "log", "tensorboard"])
def test_fully_async_resume_whose_log_ends_after_the_window_of_the_last_step_is_a_restart(tmp_path, logger):
    # crashed after the sync to version 3; the resumed run logs the window of step 3 again (idle 0.75)
    # and the log ends there: no record of an update follows to call it the final window, so it is
    # the resume's first record, kept under a new attempt, not left out
    records = _resumed(fully_async_records(3)[:-2], [(3, rollouter_window(3))])
    summary = _IMPORTERS[logger]([_fully_async_export(tmp_path, records, logger)], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.restarts == 1 and "fully_async_final_window" not in summary.skipped
    assert value(df, 3, "fully_async/rollouter/idle_ratio", attempt=1) == 0.75
    before = rollouter_window(3)["fully_async/rollouter/idle_ratio"]  # the crashed run's own window stays
    assert value(df, 3, "fully_async/rollouter/idle_ratio", attempt=0) == pytest.approx(before)


# -- where a resumed run's jobs began --------------------------------------------------------

_ASYNC_16_16 = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
_JOB_TIMES = 1_700_000_000.0  # job j's record i is logged at this + 3600 j + 600 i


def _export_jobs(tmp_path: Path, jobs: list[list[tuple[int, int, str]]], logger: str) -> list[Path]:
    """The records of ``jobs`` (resumed_async's) as each job's loggers wrote them: a console log or
    file logger's file per job (no time), a TensorBoard event file per job, a W&B history export
    per job's W&B run (a row per step, ``_timestamp`` its time)."""
    sources = []
    for j, job in enumerate(jobs):
        records = [
            (step, _JOB_TIMES + 3600 * j + 600 * i, resumed_record(kind)) for i, (step, _, kind) in enumerate(job)
        ]
        if logger == "tensorboard":
            folder = tmp_path / "tensorboard_log" / "proj" / "exp"
            folder.mkdir(parents=True, exist_ok=True)
            write_events(folder, f"events.out.tfevents.{int(records[0][1])}.host.{j}.0", records)
            sources = [tmp_path / "tensorboard_log"]
            continue
        path = tmp_path / f"job{j}.{ {'log': 'log', 'jsonl': 'jsonl', 'wandb': 'csv'}[logger] }"
        if logger == "log":
            lines = (" - ".join([f"step:{s}", *(f"{k}:{v!r}" for k, v in data.items())]) for s, _, data in records)
            path.write_text("".join(f"{line}\n" for line in lines))
        elif logger == "jsonl":
            path.write_text("".join(json.dumps({"step": s, "data": data}) + "\n" for s, _, data in records))
        else:
            pd.DataFrame([{"_step": s, "_timestamp": t, **data} for s, t, data in records]).to_csv(path, index=False)
        sources.append(path)
    return sources


_ALL_IMPORTERS = {
    "jsonl": import_verl_jsonl,
    "log": import_verl_log,
    "tensorboard": import_tensorboard,
    "wandb": import_wandb_csv,
}


@pytest.mark.parametrize("logger", ["tensorboard", "wandb", "log", "jsonl"])
def test_an_imported_resumed_async_run_leaves_out_each_job_s_fill_as_recorded_live(tmp_path, logger):
    # resumed_async's run of three jobs as a log tells it (LOGGED_JOBS): each job's first training
    # step fills the pipeline (a 600 s step, 24:8 were it a step; steady steps 16:16): step 1, step 4
    # (after job 2's validation of step 3, which trains nothing) and step 7 (after job 3's of step 6)
    live = tmp_path / "live"
    for job in LOGGED_JOBS:  # the same run recorded live: each job its own process
        with Recorder(live, meta=_ASYNC_16_16) as rec:
            rec.log_job_start()
            for step, attempt, kind in job:
                rec.log_step(step, resumed_record(kind), attempt=attempt)
    sources = _export_jobs(tmp_path, LOGGED_JOBS, logger)
    summary = _ALL_IMPORTERS[logger](sources, tmp_path / "run", strict=True, meta=_ASYNC_16_16)
    assert summary.restarts == 2
    imported, recorded = drift.analyze(tmp_path / "run"), drift.analyze(live)
    assert list(imported.per_step.index) == list(recorded.per_step.index) == [2, 3, 5, 6, 8, 9, 10]
    assert set(imported.per_step["best_rollout"]) == {16} and imported.findings == []


@pytest.mark.parametrize("logger", ["tensorboard", "wandb"])
def test_an_import_with_times_starts_each_resumed_job_at_its_first_record(tmp_path, logger):
    # job 2's first record is its validation of step 3 (3600 s on), job 3's its validation of step 6
    # (7200 s on): the jobs table says so, as the verl hook's driver would (a little earlier)
    _ALL_IMPORTERS[logger](_export_jobs(tmp_path, LOGGED_JOBS, logger), tmp_path / "run", strict=True)
    reader = RunReader(tmp_path / "run")
    assert sorted(reader.read("jobs", ["time"]).column("time").to_pylist()) == [_JOB_TIMES + 3600, _JOB_TIMES + 7200]
    assert "job_first_steps" not in reader.meta["importer"]


@pytest.mark.parametrize("logger", ["log", "jsonl"])
def test_an_import_without_times_names_each_resumed_job_s_first_training_record(tmp_path, logger):
    # no time to start a job at: meta.json names each resumed job's first training record (step, attempt)
    _ALL_IMPORTERS[logger](_export_jobs(tmp_path, LOGGED_JOBS, logger), tmp_path / "run", strict=True)
    reader = RunReader(tmp_path / "run")
    assert "jobs" not in reader.tables()
    assert reader.meta["importer"]["job_first_steps"] == [[4, 1], [7, 1]]
    assert RunFrames.from_reader(reader).fills == frozenset({1, 4, 7})


@pytest.mark.parametrize("logger", ["tensorboard", "wandb", "log", "jsonl"])
def test_an_imported_run_that_never_restarted_has_its_first_step_as_its_only_fill(tmp_path, logger):
    # the fully async trainer's records (late validation, a final window after the last update):
    # no restart, so no job start, and the run's first training step is its one pipeline fill
    records = fully_async_records(5, test_freq=2)
    summary = _ALL_IMPORTERS[logger]([_fully_async_export(tmp_path, records, logger)], tmp_path / "run", strict=True)
    reader = RunReader(tmp_path / "run")
    assert summary.restarts == 0 and "jobs" not in reader.tables()
    assert "job_first_steps" not in reader.meta["importer"]
    assert RunFrames.from_reader(reader).fills == frozenset({1})


def test_tinyzero_initial_validation_rounded_on_its_line_is_no_restart(tmp_path):
    # the dict prints 0.0078125, the console logger's line 0.008: one value at step 0, the dict's
    log = tmp_path / "tz.log"
    log.write_text(
        "(main_task pid=1) \"Initial validation metrics: {'val/test_score/countdown': 0.0078125}\"\n"
        "(main_task pid=1) step:0 - val/test_score/countdown:0.008\n"
        "(main_task pid=1) step:1 - timing_s/step:8.0 - critic/score/mean:0.025\n"
        "(main_task pid=1) step:2 - timing_s/step:8.5 - critic/score/mean:0.030\n"
    )
    summary = import_verl_log([log], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.restarts == 0 and df.attempt.eq(0).all()
    assert df[df.key == "val/test_score/countdown"][["step", "value"]].values.tolist() == [[0, 0.0078125]]
    # a value the line does not round to is the dict's own: 0.0071 prints as 0.007, not 0.008
    log.write_text(log.read_text().replace("0.0078125", "0.0071"))
    import_verl_log([log], tmp_path / "other", strict=True)
    df = steps(tmp_path / "other")
    zero = df[(df.key == "val/test_score/countdown") & (df.step == 0)]
    assert sorted(zero.value) == [0.0071, 0.008]


@pytest.mark.parametrize(
    "stamp",
    [
        "2025-08-02T10:07:09.123456Z ",
        "2025-08-02T10:07:09.123456789+00:00 ",
        "Aug  2 10:07:09 ",
        "> 2025-08-02T10:07:09.123456Z ",  # quoted in an issue
        "    2025-08-02T10:07:09Z ",  # indented as a code block
        "2025-08-02T10:07:09Z > ",
    ],
)
def test_lines_stamped_by_a_log_collector_read_as_without(tmp_path, stamp):
    # kubectl logs --timestamps, docker logs -t, ts: a time before each line, the Ray prefix after it
    plain = DATA / "validation_dicts.log"
    log = tmp_path / "stamped.log"
    log.write_text("".join(stamp + line for line in plain.read_text().splitlines(keepends=True)))
    summary = import_verl_log([log], tmp_path / "run", strict=True)
    expected = import_verl_log([plain], tmp_path / "plain", strict=True)
    assert steps(tmp_path / "run").equals(steps(tmp_path / "plain"))
    assert summary.skipped == expected.skipped and summary.steps == expected.steps


@pytest.mark.parametrize("stamp", ["2025-08-02T10:07:09.123Z ", "    2025-08-02T10:07:09Z "])
def test_a_stamped_config_dump_keeps_its_indentation(tmp_path, stamp):
    # pprint indents every line of a dump after its first: the stamp's one blank is all that goes
    config = {
        "actor_rollout_ref": {"model": {"path": "/ckpt/qwen"}, "rollout": {"n": 16}},
        "data": {"train_batch_size": 512, "max_response_length": 8192},
        "trainer": {"n_gpus_per_node": 8, "nnodes": 4},
    }
    lines = [*pprint.pformat(config, width=60).splitlines(), "step:1 - actor/loss:0.5 - critic/score/mean:0.1"]
    log = tmp_path / "x.log"
    log.write_text("".join(f"{stamp}{line}\n" for line in lines))
    summary = import_verl_log([log], tmp_path / "run")
    assert summary.skipped == {} and RunReader(tmp_path / "run").meta["batch_size"] == 512


def test_a_final_validation_a_later_line_does_not_repeat_stays_at_the_last_step(tmp_path):
    # a validation-only line that repeats none of the dict is another validation, not the dict's
    # own line: no phantom restart at step 5
    summary, df = import_lines(
        tmp_path,
        "(main_task pid=1) step:1 - timing_s/step:8.0 - critic/score/mean:0.02",
        "(main_task pid=1) step:2 - timing_s/step:8.5 - critic/score/mean:0.035",
        "(main_task pid=1) \"Final validation metrics: {'val/test_score/countdown': 0.3125}\"",
        "(main_task pid=1) step:5 - val/test_score/countdown:0.9",
    )
    val = df[df.key == "val/test_score/countdown"]
    assert val[["step", "attempt", "value"]].values.tolist() == [[2, 0, 0.3125], [5, 0, 0.9]]
    assert summary.restarts == 0


def test_printed_dicts_without_console_step_lines(tmp_path):
    summary, df = import_lines(
        tmp_path,
        "(TaskRunner pid=1) ('Initial validation metrics: {\\'val-core/a/acc/mean@1\\': 0.5}')",
        "(TaskRunner pid=1) \"Final validation metrics: {'val-core/a/acc/mean@1': 0.9}\"",
        "(TaskRunner pid=1) {'val-core/b/acc/mean@1': 0.25,",
    )
    assert value(df, 0, "val-core/a/acc/mean@1") == 0.5 and len(df) == 1
    assert summary.skipped == {"dict_without_step": 1, "unterminated_block": 1}


def test_fully_async_late_validation_is_not_a_restart(tmp_path):
    summary = import_verl_log([DATA / "fully_async.log"], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.restarts == 0 and df.attempt.eq(0).all()
    assert value(df, 1, "timing_s/param_sync") == 1.2  # a second line for the same step: merged
    assert value(df, 1, "val-core/gsm8k/acc/mean@1") == 0.4  # logged after step 2, at step 1
    assert value(df, 1, "fully_async/rollouter/idle_ratio") == 0.1  # renamed from rollouter/idle_ratio
    assert value(df, 1, "rollouter/validate_time") == 3.5
    assert value(df, 1, "fully_async/trainer/idle_ratio") == 0.55
    assert value(df, 3, "fully_async/trainer/idle_ratio") == 0.6
    assert summary.skipped == {"duplicate_of_step_line": 1}  # the pprint of the validation line


def test_restart_keeps_each_attempt(tmp_path):
    summary = import_verl_log([DATA / "restart.log"], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    assert summary.restarts == 1
    assert value(df, 3, "timing_s/gen", attempt=0) == 11.0
    assert value(df, 3, "timing_s/gen", attempt=1) == 12.0
    assert value(df, 2, "val-core/gsm8k/acc/mean@1", attempt=1) == 0.3  # the restarted run's validation
    assert value(df, 2, "timing_s/gen", attempt=0) == 10.5
    assert value(df, 4, "timing_s/gen", attempt=0) == 12.5  # first time step 4 is logged
    assert set(df.attempt) == {0, 1}


def test_restart_split_over_two_files(tmp_path):
    lines = (DATA / "restart.log").read_text().splitlines(keepends=True)
    (tmp_path / "a.log").write_text("".join(lines[:4]))
    (tmp_path / "b.log").write_text("".join(lines[4:]))
    import_verl_log([tmp_path / "a.log", tmp_path / "b.log"], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 3, "timing_s/gen", attempt=1) == 12.0 and len(df) == 13


def test_a_repeated_line_becomes_a_second_attempt(tmp_path):
    log = tmp_path / "dup.log"
    log.write_text("step:1 - timing_s/gen:1.0\nstep:1 - timing_s/gen:1.0\nstep:2 - timing_s/gen:2.0\n")
    import_verl_log([log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 1, "timing_s/gen", attempt=1) == 1.0 and value(df, 2, "timing_s/gen") == 2.0


@pytest.mark.parametrize("via_stdin", [False, True], ids=["file", "stdin"])
def test_a_log_whose_lines_end_with_a_lone_cr_is_read_whole(tmp_path, monkeypatch, via_stdin):
    # 2,000 lines of 1 kB: more than the 1 MiB a line may have, with no line feed anywhere
    line = "step:{} - timing_s/gen:{}.5 - " + " - ".join(f"k/{i}:{i}" for i in range(120))
    data = "\r".join(line.format(s, s) for s in range(1, 2001)).encode() + b"\r"
    assert len(data) > MAX_LINE_BYTES and b"\n" not in data
    log = tmp_path / "mac.log"
    log.write_bytes(data)
    if via_stdin:
        monkeypatch.setattr(sys, "stdin", _stdin(data))
    summary = import_verl_log(["-" if via_stdin else log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert summary.steps == 2000 and value(df, 2000, "timing_s/gen") == 2000.5 and value(df, 1, "k/119") == 119
    assert summary.skipped == {} and summary.notes == []  # the last CR ends the last line


@pytest.mark.parametrize("via_stdin", [False, True], ids=["file", "stdin"])
def test_a_cr_lf_pair_split_where_a_read_stops_is_one_line_end(tmp_path, monkeypatch, via_stdin):
    import rlscope.collectors.importers._source as source

    monkeypatch.setattr(source, "MAX_LINE_BYTES", 64)  # a read of lone-CR lines stops at 64 bytes
    first = b"step:1 - a:1\r"
    second = b"step:2 - a:" + b"1" * (64 - len(first) - 12) + b"\r"
    assert len(first + second) == 64 and b"\n" not in first + second
    data = first + second + b"\nstep:y - a:1\n"  # line 2 (the first ends at the LF) has a step that is no number
    log = tmp_path / "mixed.log"
    log.write_bytes(data)
    if via_stdin:
        monkeypatch.setattr(sys, "stdin", _stdin(data))
    with pytest.raises(ImportInputError, match=r"(mixed.log|<stdin>):2: bad step"):
        import_verl_log(["-" if via_stdin else log], tmp_path / "run", strict=True)


def test_the_rest_of_a_wrapped_line_cut_off_by_another_line_is_counted(tmp_path):
    log = tmp_path / "interleaved.log"
    log.write_text(
        "step:4 - a/x:1.5 - prompt_length/max\n"
        "(WorkerDict pid=4735) x\n"
        ":397.000 - prompt_length/min:12.0 - timing_s/step:131.608 - perf/time_per_step:131.6\n"
    )
    summary = import_verl_log([log], tmp_path / "run")
    assert set(steps(tmp_path / "run").key) == {"a/x"}
    assert summary.skipped == {"free_text_field": 1, "orphaned_fields": 1}
    # lines that hold metric fields but are no rest of a line: imported as before, under --strict too
    log.write_text(
        "step:4 - a/x:1.5\n"
        "Epoch 0 | global_step:5 - score/acc:1.0 - score/format:0.0\n"
        "(WorkerDict pid=2) [reward] sample 3 - score/acc:1.0 - score/format:0.0\n"
        "Step:2 - score/acc:1.0 - score/format:0.0\n"
        "eval done - score/acc:1.0 - score/format:0.0\n"
    )
    assert import_verl_log([log], tmp_path / "strict", strict=True).skipped == {}


def test_garbage_and_overlong_lines_inside_a_log_are_skipped(tmp_path):
    log = tmp_path / "mixed.log"
    with open(log, "wb") as fh:
        fh.write(b"step:1 - timing_s/gen:1.0\n\xff\xfe\x80 not utf-8 \x81\nstep:2 - timing_s/gen:2.0\n")
        fh.write(b"x" * (1_500_000) + b" step:9 - a:1\n")
        fh.write(b"step:3 - timing_s/gen:3.0")  # no final newline: perhaps 3.05, cut off
    summary = import_verl_log([log], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert sorted(set(df.step)) == [1, 2] and summary.skipped == {"overlong_line": 1, "cut_off_field": 1}
    assert summary.lines == 5  # the overlong line is one of them, though not read


def test_standard_input_is_cut_into_lines_as_a_file_is(tmp_path, monkeypatch):
    # random input of line feeds, CRs, NULs and text, with lines limited to 16 bytes so that
    # overlong lines, CR splits at the limit and holes come up often: the same lines either way
    from rlscope.collectors.importers import _source

    monkeypatch.setattr(_source, "MAX_LINE_BYTES", 16)
    rng = random.Random(7)
    path = tmp_path / "in.log"
    for _ in range(400):
        data = bytes(rng.choice(b"ab\r\n\0 ") for _ in range(rng.randrange(0, 80)))
        path.write_bytes(data)

        with open(path, "rb") as fh:
            from_file = list(_source._file_lines(fh, Tail(), follow=False))
        pieces, got, at = _source._Pieces(), [], 0
        while at < len(data):  # read in blocks of any size, as a pipe gives them
            size = rng.randrange(1, 40)
            got += pieces.add(data[at : at + size])
            at += size
        assert [*got, *pieces.rest()] == from_file, data


def _stdin(data: bytes) -> io.TextIOWrapper:
    """Standard input as a pipe gives it: text over a buffered reader, which can peek."""
    return io.TextIOWrapper(io.BufferedReader(io.BytesIO(data)))


def test_stdin(tmp_path, capsys, monkeypatch):
    data = (DATA / "ansi_ray.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", _stdin(data))  # its first bytes are looked at, then read
    code, out, _ = run_cli(capsys, "verl-log", "-", "--out", tmp_path / "run")
    assert code == 0 and "6 steps (1..6; 1 logged again after a restart)" in out  # the restart logs step 1 again
    assert RunReader(tmp_path / "run").meta["importer"]["sources"] == ["<stdin>"]


@pytest.mark.parametrize("via_stdin", [False, True], ids=["file", "stdin"])
@pytest.mark.parametrize("hole", [200, 200_000, 3_000_000])
def test_a_log_after_a_copytruncate_hole_is_read(tmp_path, monkeypatch, hole, via_stdin):
    # logrotate's copytruncate under `python train.py > train.log`: the writer goes on at its
    # offset, and the file starts with that many NUL bytes (past 1 MiB, longer than any line);
    # `tail -F train.log | rlscope import ... -` passes the hole on
    log = tmp_path / "holed.log"
    log.write_bytes(b"\0" * hole + (DATA / "crlf_tqdm.log").read_bytes())
    if via_stdin:
        monkeypatch.setattr(sys, "stdin", _stdin(log.read_bytes()))
    summary = import_verl_log(["-" if via_stdin else log], tmp_path / "run")
    plain = import_verl_log([DATA / "crlf_tqdm.log"], tmp_path / "plain")
    assert steps(tmp_path / "run").drop(columns="time").equals(steps(tmp_path / "plain").drop(columns="time"))
    assert summary.steps == plain.steps > 0 and summary.skipped == plain.skipped


def test_a_jsonl_after_a_hole_on_stdin_is_read(tmp_path, monkeypatch):
    data = b"\0" * 300 + (DATA / "verl_file_logger.jsonl").read_bytes()
    monkeypatch.setattr(sys, "stdin", _stdin(data))
    summary = import_verl_jsonl(["-"], tmp_path / "run")
    plain = import_verl_jsonl([DATA / "verl_file_logger.jsonl"], tmp_path / "plain")
    assert steps(tmp_path / "run").equals(steps(tmp_path / "plain")) and summary.steps == plain.steps > 0
    assert summary.skipped == plain.skipped  # the fixture's own bad lines, and no more


def test_a_log_in_another_8_bit_encoding_is_read(tmp_path):
    # Chinese notes in GBK around ASCII metric lines: not UTF-8, not binary either
    log = tmp_path / "gbk.log"
    log.write_bytes(("训练日志 第一轮。\n" * 600).encode("gbk") + b"step:1 - timing_s/step:10.5 - a/b:1\n")
    summary = import_verl_log([log], tmp_path / "run")
    assert summary.steps == 1 and value(steps(tmp_path / "run"), 1, "timing_s/step") == 10.5
    # control bytes where text would be are still refused
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(1, 32)) * 300)
    with pytest.raises(ImportInputError, match=r"junk\.bin: binary data"):
        import_verl_log([junk], tmp_path / "junk")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_log_is_named_as_such(tmp_path, capsys, encoding):
    log = tmp_path / "powershell.log"
    log.write_text("step:1 - timing_s/gen:1.5\n", encoding=encoding)
    code, out, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "run")
    assert code == 1 and out == ""
    assert err == f"rlscope: {log}: UTF-16 text; convert it to UTF-8 first (iconv -f utf-16 -t utf-8)\n"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (gzip.compress(b"step:1 - a:1\n"), "standard input: gzip-compressed; decompress it in the pipe: zcat"),
        (bytes(range(256)) * 4, "standard input: binary data"),
    ],
    ids=["gzip", "binary"],
)
def test_stdin_that_is_not_text_is_named(tmp_path, capsys, monkeypatch, data, message):
    monkeypatch.setattr(sys, "stdin", _stdin(data))
    code, out, err = run_cli(capsys, "verl-log", "-", "--out", tmp_path / "run")
    assert code == 1 and out == "" and err.startswith("rlscope: ") and message in err and err.count("\n") == 1


class _TrickleRaw(io.RawIOBase):
    """A pipe whose writer has delivered one byte when it is first read (the peek sees one)."""

    def __init__(self, data: bytes) -> None:
        self._data, self._reads = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = 1 if self._reads == 0 else min(len(buffer), len(self._data))
        self._reads += 1
        buffer[:size], self._data = self._data[:size], self._data[size:]
        return size


def test_gzip_on_stdin_is_named_when_the_pipe_first_gives_one_byte(tmp_path, capsys, monkeypatch):
    stdin = io.TextIOWrapper(io.BufferedReader(_TrickleRaw(gzip.compress(b"step:1 - a:1\n"))))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, err = run_cli(capsys, "verl-log", "-", "--out", tmp_path / "run")
    assert code == 1 and out == "" and "standard input: gzip-compressed" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_cli_summary_and_meta(tmp_path, capsys):
    meta = '{"gpu": {"type": "H100", "count": 8}, "framework": "verl-fork"}'
    code, out, err = run_cli(capsys, "verl-log", DATA / "restart.log", "--out", tmp_path / "run", "--meta", meta)
    assert code == 0 and err == ""
    # steps 0..4, each counted once: 0 is validation only; the restart logs 2 (its validation, of a
    # step trained before it) and 3 again
    assert (
        out.startswith("verl-log: 5 steps (0..4; step 0 validation only; 2 logged again after a restart), 3 keys,")
        and "1 restart: steps logged again" in out
    )
    written = RunReader(tmp_path / "run").meta
    assert written["gpu"] == {"type": "H100", "count": 8} and written["framework"] == "verl-fork"
    importer = written["importer"]
    assert (importer["restarts"], importer["steps"], importer["steps_logged_again"]) == (1, 5, 2)


def test_segments_are_written_in_bounded_batches(tmp_path):
    sink = StepSink(tmp_path / "run", importer="test", sources=[], flush_rows=10)
    for step in range(100):
        sink.add(step, {"timing_s/gen": float(step), "timing/step": 2.0 * step})
    summary = sink.close()
    reader = RunReader(tmp_path / "run")
    assert len(reader.segments("steps")) == 20 and reader.row_count("steps") == 200
    assert summary.steps == 100 and summary.renamed == {"timing/step": "timing_s/step"}


def _interrupt_at_line(at: int, *modules: str):
    """A trace function raising KeyboardInterrupt before the ``at``-th line run in the files of
    ``modules``, as a signal handler would there."""
    files = {Path(sys.modules[name].__file__).resolve() for name in modules}
    lines = 0

    def tracer(frame, event, arg):
        if Path(frame.f_code.co_filename).resolve() not in files:
            return None

        def line(frame, event, arg):
            nonlocal lines
            if event == "line":
                lines += 1
                if lines == at:
                    raise KeyboardInterrupt
            return line

        return line

    return tracer


def test_an_interrupt_inside_a_record_leaves_that_record_out_whole(tmp_path):
    # Ctrl-C or SIGTERM raised between any two lines of a record's write (a followed file; a
    # second signal on a followed pipe): the close writes the records before it, and that record
    # whole or not at all; columns of unequal length failed the close, all buffered rows lost
    for at in range(1, 500):  # the record's write has far fewer lines
        sink = StepSink(tmp_path / f"run{at}", importer="verl-log", sources=["x"])
        sink.add(1, {"a/b": 1.0, "a/c": 2.0})
        sys.settrace(_interrupt_at_line(at, StepSink.__module__))
        try:
            sink.add(2, {"a/b": 3.0, "a/c": 4.0, "a/d": 5.0})
            done = True
        except KeyboardInterrupt:
            done = False
        finally:
            sys.settrace(None)
        sink.close(interrupted=True)
        rows = steps(tmp_path / f"run{at}").groupby("step").size().to_dict()
        assert rows in ({1: 2}, {1: 2, 2: 3}), (at, rows)
        if done:  # not interrupted: the whole record written
            assert rows == {1: 2, 2: 3}
            return
    raise AssertionError("the record's write was interrupted at every line")


def test_an_interrupt_during_a_write_leaves_each_row_written_once(tmp_path):
    # Ctrl-C or SIGTERM raised between any two lines of a segment's write (a quiet followed
    # pipe's periodic write; a second signal): the close writes the rows the write did not, and
    # not again those it did (an interrupt after the segment's rename wrote them twice)
    for at in range(1, 500):  # a write has far fewer lines
        sink = StepSink(tmp_path / f"run{at}", importer="verl-log", sources=["x"])
        sink.add(1, {"a/b": 1.0, "a/c": 2.0})
        sink.flush()
        sink.add(2, {"a/b": 3.0, "a/c": 4.0})
        sys.settrace(_interrupt_at_line(at, StepSink.__module__, "rlscope.trace.store"))
        try:
            sink.flush()
            done = True
        except KeyboardInterrupt:
            done = False
        finally:
            sys.settrace(None)
        summary = sink.close(interrupted=True)
        df = steps(tmp_path / f"run{at}")
        assert sorted(zip(df.step, df.key, df.value, strict=True)) == [
            (1, "a/b", 1.0),
            (1, "a/c", 2.0),
            (2, "a/b", 3.0),
            (2, "a/c", 4.0),
        ], at
        assert summary.values == 4
        if done:
            return
    raise AssertionError("the write was interrupted at every line")


# -- verl file logger, W&B CSV --------------------------------------------------------------


def test_verl_jsonl(tmp_path):
    summary = import_verl_jsonl([DATA / "verl_file_logger.jsonl"], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 1, "timing_s/gen") == 10.5 and value(df, 1, "perf/mfu/actor") == 0.31
    assert math.isnan(value(df, 1, "actor/pg_loss"))  # orjson writes NaN as null
    assert value(df, 2, "actor/entropy") == 0.5
    assert value(df, 1, "timing_s/gen", attempt=1) == 9.0  # the step went back: a restart
    # not JSON, a step that is not a number; the truncated last line; a list value
    assert summary.skipped == {"bad_json": 2, "cut_off_field": 1, "non_numeric_value": 1}
    assert RunReader(tmp_path / "run").meta["importer"]["name"] == "verl-jsonl"


def test_verl_jsonl_strict(tmp_path, capsys):
    code, _, err = run_cli(capsys, "verl-jsonl", DATA / "verl_file_logger.jsonl", "-o", tmp_path / "run", "--strict")
    assert (
        code == 1 and err.startswith(f"rlscope: {DATA / 'verl_file_logger.jsonl'}:3: bad json") and err.count("\n") == 1
    )


def test_wandb_csv(tmp_path):
    summary = import_wandb_csv([DATA / "wandb_history.csv"], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert sorted(set(df.step)) == [0, 1, 2, 3]
    assert value(df, 0, "val-core/gsm8k/acc/mean@1") == 0.2
    assert value(df, 1, "timing_s/gen") == 10.5 and value(df, 1, "actor/pg_loss") == -0.01
    assert math.isnan(value(df, 2, "actor/pg_loss")) and value(df, 3, "timing_s/gen") == math.inf
    assert df[df.step == 1].time.iloc[0] == pytest.approx(1767225632.6)
    assert not df.key.str.startswith("_").any()  # _runtime and _timestamp are W&B's, not metrics
    assert len(df[df.step == 0]) == 1  # empty cells are not values
    assert summary.skipped == {"bad_row": 1, "non_numeric_value": 1}


def test_wandb_csv_with_a_byte_order_mark(tmp_path):
    csv_file = tmp_path / "excel.csv"
    csv_file.write_bytes("\ufeff_step,timing_s/gen\r\n1,2.5\r\n".encode())
    import_wandb_csv([csv_file], tmp_path / "run", strict=True)
    assert value(steps(tmp_path / "run"), 1, "timing_s/gen") == 2.5


def test_wandb_csv_strict_and_wrong_file(tmp_path, capsys):
    code, _, err = run_cli(capsys, "wandb-csv", DATA / "wandb_history.csv", "-o", tmp_path / "a", "--strict")
    assert code == 1 and err.startswith(f"rlscope: {DATA / 'wandb_history.csv'}:6: bad row")
    code, _, err = run_cli(capsys, "wandb-csv", DATA / "values.log", "-o", tmp_path / "b")
    assert code == 1 and "no step column" in err and err.count("\n") == 1


# -- following a live file --------------------------------------------------------------------


def test_follow_tails_a_growing_log(tmp_path):
    log = tmp_path / "live.log"
    log.write_text("(TaskRunner pid=1) step:1 - timing_s/gen:1.5 - timing_s/step:3.0\n")
    stop = threading.Event()

    def write() -> None:
        time.sleep(0.5)  # let the importer reach the end of what is there
        with open(log, "a") as fh:
            for step in (2, 3, 4):
                fh.write(f"(TaskRunner pid=1) step:{step} - timing_s/gen:{step}.5")  # half a line...
                fh.flush()
                time.sleep(0.05)
                fh.write(f" - timing_s/step:{step}.0\n")  # ...then the rest
                fh.flush()
                time.sleep(0.05)
        stop.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        summary = import_verl_log([log], tmp_path / "run", tail=Tail(True, 0.02, max_seconds=10, stop=stop))
    finally:
        writer.join()
    df = steps(tmp_path / "run")
    assert [value(df, s, "timing_s/step") for s in (1, 2, 3, 4)] == [3.0, 2.0, 3.0, 4.0]
    assert value(df, 4, "timing_s/gen") == 4.5 and summary.steps == 4
    assert df[df.step == 1].time.isna().all() and df[df.step == 4].time.notna().all()


def test_follow_on_stdin_writes_steps_while_the_pipe_is_quiet(tmp_path, monkeypatch):
    # a live job piped in: its steps reach the run directory while the job still runs, not at EOF
    read_end, write_end = os.pipe()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.FileIO(read_end, "rb"))))
    seen_before_eof: list[list[int]] = []

    def job() -> None:
        with open(write_end, "wb", buffering=0) as pipe:
            for step in (1, 2, 3):
                pipe.write(f"(TaskRunner pid=1) step:{step} - timing_s/step:1{step}.0 - a/b:{step}\n".encode())
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not seen_before_eof:
                time.sleep(0.05)  # the job is quiet between steps: the import writes meanwhile
                try:  # a step's segment, or meta.json, may land after the folder does
                    written = RunReader(tmp_path / "run", require_meta=False).read("steps", ["step"])
                except RunDirError:
                    continue
                if sorted(set(written.column("step").to_pylist())) == [1, 2, 3]:
                    seen_before_eof.append([1, 2, 3])

    writer = threading.Thread(target=job)
    writer.start()
    try:
        summary = import_verl_log(["-"], tmp_path / "run", tail=Tail(True, 0.02, max_seconds=20))
    finally:
        writer.join()
    # the last step line is complete once the pipe goes quiet (verl prints whole lines)
    assert seen_before_eof == [[1, 2, 3]] and summary.steps == 3 and not summary.interrupted


def test_follow_a_file_logger_rewritten_by_a_restart(tmp_path):
    path = tmp_path / "run.jsonl"
    filler = {f"actor/x{i}": 0.5 for i in range(20)}
    path.write_text("".join(json.dumps({"step": s, "data": {"timing_s/gen": s, **filler}}) + "\n" for s in (1, 2, 3)))
    stop = threading.Event()

    def restart() -> None:
        time.sleep(0.5)  # the importer has read the first run's lines by then
        with open(path, "wb") as fh:  # verl's FileLogger opens its file with "wb"
            fh.write(b'{"step": 2, "data": {"timing_s/gen": 20.0}}\n')
            fh.flush()
        time.sleep(0.3)
        stop.set()

    writer = threading.Thread(target=restart)
    writer.start()
    try:
        import_verl_jsonl([path], tmp_path / "out", tail=Tail(True, 0.02, max_seconds=10, stop=stop))
    finally:
        writer.join()
    df = steps(tmp_path / "out")
    assert value(df, 3, "timing_s/gen") == 3.0 and value(df, 2, "timing_s/gen", attempt=1) == 20.0


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_follow_ends_cleanly_when_interrupted(tmp_path, capsys, how):
    log = tmp_path / "live.log"
    # the last line is being written when the import is stopped: its last field may be cut off
    log.write_text("step:1 - timing_s/gen:1.0\nstep:2 - timing_s/gen:2.0\nstep:3 - timing_s/gen:3.0 - timing_s/ref:1")
    if how == "ctrl-c":
        timer = threading.Timer(0.5, _thread.interrupt_main)
    else:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code, out, err = run_cli(
            capsys, "verl-log", log, "--out", tmp_path / "run", "--follow", "--poll", "0.02", "--max-seconds", "20"
        )
    finally:
        timer.cancel()
    assert code == 0 and err == ""
    assert (
        "3 steps (1..3)" in out
        and f"stopped by {'SIGINT' if how == 'ctrl-c' else 'SIGTERM'};" in out
        and "cut off" in out
    )
    df = steps(tmp_path / "run")
    assert df.shape[0] == 3 and value(df, 3, "timing_s/gen") == 3.0 and "timing_s/ref" not in set(df["key"])


@pytest.mark.parametrize("ending", ["sigterm", "max-seconds", "strict"])
def test_follow_on_stdin_ends_cleanly_while_the_pipe_is_open(tmp_path, ending):
    # the writer is still there (a live job): the import must end on its own terms, in its own
    # process, without a reader stuck in the pipe aborting the interpreter at exit
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", "-", "--out", str(tmp_path / "run")]
    args += ["--follow", "--poll", "0.05"] + (["--max-seconds", "1"] if ending == "max-seconds" else [])
    args += ["--strict"] if ending == "strict" else []
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdin is not None
    child.stdin.write(
        b"step:1 - timing_s/step:11.0 - a/b:1\n" + (b"step:2 - a/b:oops\n" if ending == "strict" else b"")
    )
    child.stdin.write(b"step:3 - timing_s/step:13.0 - a/")  # the job is writing this line
    child.stdin.flush()
    if ending == "sigterm":
        deadline = time.monotonic() + 20  # a child slow to start (a loaded machine) has its handler once it reads
        while _unread(child.stdin.fileno()) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.5)
        child.send_signal(signal.SIGTERM)
    try:
        out, err = child.communicate(timeout=30)
    finally:
        child.stdin.close()
    assert b"Fatal Python error" not in err
    if ending == "strict":
        assert child.returncode == 1 and err == b"rlscope: <stdin>:2: bad value: a/b:oops\n"
    else:
        # the line begun is read as cut off, as from a file: its last field left out
        assert child.returncode == 0 and err == b"" and b"2 steps (1..3)" in out and b"'a/', may be cut off" in out


@pytest.mark.parametrize("writer", ["busy", "silent"])
def test_follow_on_stdin_stops_at_max_seconds_whatever_the_pipe_does(tmp_path, writer):
    # a job writing every 50 ms (never quiet for a poll interval), or one that has written
    # nothing yet: --max-seconds ends the import either way, with exit code 0
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", "-", "--out", str(tmp_path / "run")]
    args += ["--follow", "--poll", "0.2", "--max-seconds", "1"]
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdin is not None
    started, step = time.monotonic(), 0
    try:
        while child.poll() is None and time.monotonic() - started < 20:
            if writer == "busy":
                step += 1
                child.stdin.write(f"step:{step} - timing_s/step:1.0 - a/b:{step}\n".encode())
                child.stdin.flush()
            time.sleep(0.05)
        out, err = child.communicate(timeout=10)
    finally:
        child.stdin.close()
    assert child.returncode == 0 and err == b"" and time.monotonic() - started < 15
    assert (re.search(rb"(?<!\d)0 steps", out) is not None) == (writer == "silent"), out  # not "20 steps"


@pytest.mark.parametrize("source", ["stdin", "fifo"])
def test_a_signal_before_the_first_8_kib_keeps_what_was_read(tmp_path, source):
    # lines come every 0.2 s, never quiet for a poll interval, fewer than 8 KiB in all: SIGTERM
    # then ends the import with every line read imported, the one begun read as cut off
    fifo = tmp_path / "live.fifo"
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", "-", "--out", str(tmp_path / "run")]
    args += ["--follow", "--poll", "1"]
    if source == "fifo":
        os.mkfifo(fifo)
        args[5] = str(fifo)
    child = subprocess.Popen(
        args, stdin=subprocess.PIPE if source == "stdin" else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    writer = child.stdin if source == "stdin" else open(fifo, "wb")
    try:
        for step in range(1, 6):
            writer.write(f"step:{step} - timing_s/step:1{step}.0 - a/b:{step}\n".encode())
            writer.flush()
            time.sleep(0.2)
        writer.write(b"step:6 - timing_s/step:16.0 - a/")
        writer.flush()
        deadline = time.monotonic() + 20  # a child slow to start (a loaded machine) has its handler once it reads
        while _unread(writer.fileno()) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    finally:
        writer.close()
    # a pipe is read in blocks, a FIFO given by its path too: the line begun is not lost in a read
    # waiting for its end
    assert child.returncode == 0 and err == b""
    assert b"6 steps (1..6)" in out and b"'a/', may be cut off" in out


def test_a_followed_fifo_ends_the_import_when_its_writer_closes_it(tmp_path):
    # as docs/collectors.md says: a pipe's end is the input's end (it was "Illegal seek", exit 1)
    fifo = tmp_path / "live.fifo"
    os.mkfifo(fifo)
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", str(fifo), "--out", str(tmp_path / "run")]
    child = subprocess.Popen([*args, "--follow", "--poll", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with open(fifo, "wb") as writer:  # waits for the import to open it
            writer.write(b"step:1 - timing_s/step:11.0\nstep:2 - timing_s/step:12.0\n")
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0 and err == b"" and b"2 steps (1..2)" in out and b"stopped" not in out


def _import_args(tmp_path: Path, *more: str, sources: tuple[str, ...] = ("-",)) -> list[str]:
    """``rlscope import verl-log SOURCES --out RUN --follow`` and ``more``, as a child runs it."""
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", *sources, "--out", str(tmp_path / "run")]
    return [*args, "--follow", *more]


def _flood(write_end: int, stop: threading.Event, written: list[int]) -> None:
    """Write numbered step lines into a pipe until ``stop``, in writes of whole lines that a
    pipe passes whole (under PIPE_BUF bytes): a reader never gets part of a line. ``written``
    holds the last step written."""
    with contextlib.suppress(BrokenPipeError):
        while not stop.is_set():
            batch = range(written[0] + 1, written[0] + 41)
            os.write(write_end, "".join(f"step:{s} - timing_s/step:1.0 - a/b:{s}\n" for s in batch).encode())
            written[0] = batch[-1]
    os.close(write_end)


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe: none once the import reads it (its signal handlers are set)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]


def _left_in_pipe(read_end: int, writer: threading.Thread) -> bytes:
    """What the importer left in the pipe, read until the writer is gone (freeing it if blocked)."""
    os.set_blocking(read_end, False)
    left = b""
    while True:
        try:
            chunk = os.read(read_end, 1 << 16)
        except BlockingIOError:
            chunk = b""
        left += chunk
        if not chunk and not writer.is_alive():
            return left
        time.sleep(0 if chunk else 0.01)


def _signal_busy_import(
    tmp_path: Path, *signals: signal.Signals, gap: float = 0.0, sources: tuple[str, ...] = ("-",), **popen
) -> tuple[bytes, int, int]:
    """Import a pipe that a job floods with step lines (standard input, the first of ``sources``),
    send ``signals`` (``gap`` seconds apart) once it is under way; the import's output, the first
    step it left in the pipe and the last step written to the pipe before the first signal (an
    import it stopped read no further)."""
    read_end, write_end = os.pipe()
    args = _import_args(tmp_path, "--poll", "0.2", sources=sources)
    child = subprocess.Popen(args, stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    stop, written = threading.Event(), [0]
    writer = threading.Thread(target=_flood, args=(write_end, stop, written))
    writer.start()
    try:
        deadline = time.monotonic() + 20
        while written[0] < 5000 and time.monotonic() < deadline:  # more than a pipe holds: it reads
            time.sleep(0.01)
        time.sleep(0.2)
        first_signalled = written[0]
        for index, sig in enumerate(signals):
            child.send_signal(sig)
            time.sleep(gap if index < len(signals) - 1 else 0)
        out, err = child.communicate(timeout=30)
    finally:
        stop.set()
        left = _left_in_pipe(read_end, writer)
        writer.join()
        os.close(read_end)
    assert child.returncode == 0 and err == b"", err
    return out, int(re.match(rb"step:(\d+) ", left).group(1)), first_signalled


def _lines_read(out: bytes) -> int:
    return int(re.search(rb"read (\d+) lines", out).group(1))


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
@pytest.mark.parametrize("followed", [True, False], ids=["followed", "before-a-followed-file"])
def test_a_signal_on_a_busy_pipe_imports_every_line_read(tmp_path, how, followed):
    # a job that never stops writing: the lines the import took from the pipe but had not parsed
    # when the signal came are imported too, so the steps written are those the summary counts
    # and the pipe goes on with the next one; so too for a pipe read (to its end) before the
    # file that is followed, which the signal stops the import before
    later = tmp_path / "later.log"
    later.write_text("step:900000 - timing_s/step:1.0 - a/b:0\n")
    out, next_in_pipe, _ = _signal_busy_import(tmp_path, how, sources=("-",) if followed else ("-", str(later)))
    read = _lines_read(out)
    assert f"stopped by {how.name}; everything read so far was written".encode() in out
    df = steps(tmp_path / "run")
    assert read > 100 and sorted(set(df.step)) == list(range(1, read + 1))  # none lost
    assert len(df) == 2 * read and (df.attempt == 0).all()  # and each imported once
    assert next_in_pipe == read + 1  # and none read that is not counted


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_on_a_busy_followed_file_imports_the_line_being_imported(tmp_path, how):
    # a log growing faster than it is imported: the line being imported when the signal comes is
    # finished, so the steps written are the lines the summary counts, none cut short
    log, stop = tmp_path / "busy.log", threading.Event()

    def grow() -> None:
        with open(log, "a") as fh:
            step = 0
            while not stop.is_set() and step < 2_000_000:
                fh.write("".join(f"step:{s} - timing_s/step:1.0 - a/b:{s}\n" for s in range(step + 1, step + 41)))
                fh.flush()
                step += 40

    log.touch()
    writer = threading.Thread(target=grow)
    writer.start()
    try:
        child = subprocess.Popen(
            _import_args(tmp_path, "--poll", "0.2", sources=(str(log),)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 20
        while not (tmp_path / "run" / "steps").exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # under way: it wrote its first segment (its handlers are set)
        time.sleep(0.3)
        child.send_signal(how)
        out, err = child.communicate(timeout=30)
    finally:
        stop.set()
        writer.join()
    assert child.returncode == 0 and err == b"", err
    assert f"stopped by {how.name}; everything read so far was written".encode() in out
    read, df = _lines_read(out), steps(tmp_path / "run")
    assert read > 100 and sorted(set(df.step)) == list(range(1, read + 1))
    assert len(df) == 2 * read and (df.attempt == 0).all()  # each line whole, once


def test_a_second_signal_on_a_busy_followed_pipe_stops_at_once_keeping_what_was_imported(tmp_path):
    out, next_in_pipe, _ = _signal_busy_import(tmp_path, signal.SIGTERM, signal.SIGTERM, gap=0.002)
    assert b"stopped" in out and b"Traceback" not in out
    df = steps(tmp_path / "run")
    rows = df.groupby("step").size()
    # what was imported before it is written: a prefix of what was read, each step once (the last
    # perhaps in part: the second signal may land inside it)
    assert list(rows.index) == list(range(1, len(rows) + 1)) and (df.attempt == 0).all()
    assert (rows.iloc[:-1] == 2).all() and rows.iloc[-1] <= 2
    assert 0 < len(rows) <= _lines_read(out) < next_in_pipe


@pytest.mark.parametrize(
    ("ignored", "other"), [(signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT)], ids=["sigint", "sigterm"]
)
def test_an_ignored_signal_stays_ignored_while_following(tmp_path, ignored, other):
    # a job started with "&" by a script ignores SIGINT, and a parent may start one ignoring
    # SIGTERM: so does its import; the other signal still stops it
    ignore = lambda: signal.signal(ignored, signal.SIG_IGN)  # noqa: E731
    out, next_in_pipe, at_ignored = _signal_busy_import(tmp_path, ignored, other, gap=1.0, preexec_fn=ignore)
    read = _lines_read(out)
    assert read > at_ignored  # it went on reading after the ignored signal
    assert f"stopped by {other.name};".encode() in out and next_in_pipe == read + 1
    assert sorted(set(steps(tmp_path / "run").step)) == list(range(1, read + 1))


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
@pytest.mark.parametrize("followed", [True, False], ids=["followed", "before-a-followed-file"])
def test_a_signal_on_a_quiet_pipe_stops_at_once(tmp_path, how, followed):
    # a pipe quiet for a long poll interval (or read whole before the file that is followed): the
    # signal does not wait for it, and the lines it gave are imported
    later = tmp_path / "later.log"
    later.write_text("step:3 - timing_s/step:13.0\n")
    args = _import_args(tmp_path, "--poll", "30", sources=("-",) if followed else ("-", str(later)))
    read_end, write_end = os.pipe()
    child = subprocess.Popen(args, stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        os.write(write_end, b"step:1 - timing_s/step:11.0\nstep:2 - timing_s/step:12.0\n")
        deadline = time.monotonic() + 20
        while _unread(read_end) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # waiting for more
        child.send_signal(how)
        sent = time.monotonic()
        out, err = child.communicate(timeout=30)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert time.monotonic() - sent < 5 and child.returncode == 0 and err == b""
    # the signal ends the import, before the file when it came during the pipe
    assert b"2 steps (1..2)" in out and f"stopped by {how.name};".encode() in out


# the CLI, sending itself SIGTERM once, in the middle of an import of pandas' compiled modules
# that the import's first write makes (through pyarrow), if it makes one
_SIGTERM_IN_THE_FIRST_WRITES_IMPORT = """
import os, signal, sys

class Finder:
    fired = False

    def find_spec(self, name, path=None, target=None):
        frame = sys._getframe()
        while frame is not None and frame.f_code.co_name != "flush":
            frame = frame.f_back
        if frame is not None and name in ("pandas._libs.interval", "pandas._libs.tslibs") and not Finder.fired:
            Finder.fired = True
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, Finder())
from rlscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_signal_during_the_first_write_of_a_followed_pipe_stops_it_cleanly(tmp_path):
    # the first write of a quiet followed pipe (2 s in) imported pandas through pyarrow: a signal
    # in the middle of that import left pandas half imported, and the close failed on it (exit 1,
    # a traceback, no summary); it is imported before the input is read
    run = tmp_path / "run"
    args = [sys.executable, "-c", _SIGTERM_IN_THE_FIRST_WRITES_IMPORT, "import", "verl-log", "-", "--out", str(run)]
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [*args, "--follow", "--poll", "0.05"], stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        os.write(write_end, b"".join(b"step:%d - a/b:%d\n" % (step, step) for step in range(1, 7)))
        deadline = time.monotonic() + 20
        while child.poll() is None and not list(run.glob("steps/*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.02)
        if child.poll() is None:  # the first write made no such import: a signal after it
            child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert child.returncode == 0 and err == b"", err[-600:]
    assert b"6 steps (1..6)" in out and b"stopped by SIGTERM; everything read so far was written" in out


# the CLI, sending itself SIGTERM as the import of step 2 begins: a signal that comes there
_SIGTERM_AS_STEP_2_IS_IMPORTED = """
import os, signal, sys
from rlscope.collectors.importers import StepSink

add = StepSink.add

def add_signalled(self, step, metrics, **kw):
    if step == 2 and not add_signalled.fired:
        add_signalled.fired = True
        os.kill(os.getpid(), signal.SIGTERM)
    return add(self, step, metrics, **kw)

add_signalled.fired = False
StepSink.add = add_signalled
from rlscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("source", ["file", "pipe"])
@pytest.mark.parametrize("end", ["\n", ""], ids=["whole", "cut-off"])
def test_a_signal_while_the_last_line_read_is_imported_waits_for_it(tmp_path, source, end):
    # the last line read is imported when the input goes quiet (whole), or, cut off, once
    # --max-seconds ends the follow: a signal then waits for its import (step 2 is written),
    # and the summary says it came
    text = b"step:1 - timing_s/step:11.0\nstep:2 - timing_s/step:12.0 - a/b:2.0" + end.encode()
    log = tmp_path / "x.log"
    log.write_bytes(text)
    run = tmp_path / "run"
    where = "-" if source == "pipe" else str(log)
    args = [sys.executable, "-c", _SIGTERM_AS_STEP_2_IS_IMPORTED, "import", "verl-log", where, "--out", str(run)]
    args += ["--follow", "--poll", "0.05", "--max-seconds", "1"]
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if source == "pipe":
        child.stdin.write(text)  # and left open: --max-seconds ends the follow
        child.stdin.flush()
    try:
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0 and err == b"", err[-600:]
    # and it is said, though the import was ending anyway (cut off: the end held it over the close)
    assert b"stopped by SIGTERM; everything read so far was written" in out
    df = steps(run)
    assert sorted(set(df.step)) == [1, 2] and value(df, 2, "timing_s/step") == 12.0
    assert ("a/b" in set(df[df.step == 2].key)) == bool(end)  # cut off: its last field is left out


def test_follow_on_stdin_redirected_from_a_growing_file_follows_it(tmp_path):
    # ``rlscope import verl-log - --follow < train.log`` reads it to its end and then what is
    # appended, as ``rlscope import verl-log train.log --follow`` does; a file's end is not a pipe's
    log = tmp_path / "train.log"
    log.write_text("step:1 - timing_s/step:11.0\nstep:2 - timing_s/step:12.0\n")

    def written(segments: int) -> None:  # the child imported what it read, up to its end: it writes then
        deadline = time.monotonic() + 20
        while len(list(tmp_path.glob("run/steps/*.parquet"))) < segments and time.monotonic() < deadline:
            time.sleep(0.02)

    with open(log, "rb") as stdin:
        child = subprocess.Popen(
            _import_args(tmp_path, "--poll", "0.05"), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        written(1)  # not on the file's offset: the child reads it all before its import starts (a slow machine)
        with open(log, "a") as fh:
            fh.write("step:3 - timing_s/step:13.0\n")
        written(2)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    assert child.returncode == 0 and err == b"" and b"3 steps (1..3)" in out and b"stopped by SIGTERM;" in out
    df = steps(tmp_path / "run")
    assert value(df, 3, "timing_s/step") == 13.0
    # what the file held is stamped with no time, as from a path; what came later, when read
    assert df[df.step <= 2].time.isna().all() and df[df.step == 3].time.notna().all()


def test_stdin_from_a_file_before_a_followed_log_is_read_from_its_start(tmp_path):
    # ``rlscope import verl-log - live.log --follow < old.log``: old.log is checked by a look
    # that buffers its first bytes, and those lines are imported too, before live.log's
    old = tmp_path / "old.log"
    old.write_text("".join(f"step:{n} - timing_s/step:{n}.5\n" for n in range(1, 601)))  # ~18 kB: past any look
    live = tmp_path / "live.log"
    live.write_text("step:601 - timing_s/step:601.5\n")
    with open(old, "rb") as stdin:
        child = subprocess.run(
            _import_args(tmp_path, "--max-seconds", "0.5", sources=("-", str(live))),
            stdin=stdin,
            capture_output=True,
            timeout=60,
        )
    assert child.returncode == 0 and child.stderr == b"", child.stderr[-600:]
    df = steps(tmp_path / "run")
    assert sorted(set(df.step)) == list(range(1, 602)) and value(df, 1, "timing_s/step") == 1.5


def _waiting_to_open_a_fifo(pid: int) -> bool:
    """Whether ``pid`` is blocked opening a FIFO that no one writes to (Linux's /proc says so)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/wchan").read_text() == "wait_for_partner"
    return False


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux's /proc/PID/wchan")
def test_a_signal_while_a_followed_fifo_has_no_writer_stops_the_import(tmp_path):
    # a log, then a FIFO (mkfifo) to follow that no job has opened yet: opening it waits for a
    # writer, and Ctrl-C there stops the import at once, the log's lines written, as it does
    # in any wait for input (the end of the log before it holds no signal over that wait)
    log = tmp_path / "old.log"
    log.write_text("step:1 - timing_s/step:1.5\nstep:2 - timing_s/step:2.5\n")
    fifo = tmp_path / "live.fifo"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        _import_args(tmp_path, sources=(str(log), str(fifo))), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not _waiting_to_open_a_fifo(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _waiting_to_open_a_fifo(child.pid)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == 0 and err == b"", err[-600:]
    assert b"stopped by SIGINT; everything read so far was written" in out
    assert sorted(set(steps(tmp_path / "run").step)) == [1, 2]


def test_utf16_on_a_followed_standard_input_is_named(tmp_path):
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", "-", "--out", str(tmp_path / "run"), "--follow"]
    text = "step:1 - timing_s/gen:1.5\nstep:2 - timing_s/gen:2.5\n".encode("utf-16-le")  # no byte-order mark
    done = subprocess.run(args, input=text, capture_output=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith(b"rlscope: standard input: UTF-16 text")


def test_gzip_on_a_followed_standard_input_is_named_when_its_first_byte_comes_alone(tmp_path):
    # the pipe gives one byte, goes quiet past a poll interval, then gives the rest
    args = [sys.executable, "-m", "rlscope", "import", "verl-log", "-", "--out", str(tmp_path / "run")]
    child = subprocess.Popen(
        [*args, "--follow", "--poll", "0.1", "--max-seconds", "10"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None
    data = gzip.compress(b"step:1 - timing_s/step:1.0 - a/b:1\n" * 50)
    try:
        child.stdin.write(data[:1])
        child.stdin.flush()
        time.sleep(0.5)
        child.stdin.write(data[1:])
        child.stdin.flush()
        _, err = child.communicate(timeout=30)
    finally:
        child.stdin.close()
    assert child.returncode == 1 and err.startswith(b"rlscope: standard input: gzip-compressed")


def test_a_closed_standard_input_is_one_line(tmp_path):
    command = f"{sys.executable} -m rlscope import verl-log - --out {tmp_path / 'run'} <&-"
    done = subprocess.run(command, shell=True, capture_output=True, timeout=60)
    assert done.returncode == 1 and done.stderr == b"rlscope: standard input: closed, nothing to read\n"


def test_follow_stops_after_max_seconds(tmp_path, capsys):
    log = tmp_path / "live.log"
    log.write_text("step:1 - timing_s/gen:1.0\n")
    started = time.monotonic()
    code, out, _ = run_cli(capsys, "verl-log", log, "--out", tmp_path / "run", "--follow", "--max-seconds", "0.3")
    assert code == 0 and "1 step (1..1)" in out and time.monotonic() - started < 5


# -- TensorBoard ------------------------------------------------------------------------------


def write_events(folder: Path, name: str, events: list[tuple[int, float, dict]]) -> None:
    """Write scalar events ``(step, wall time, {tag: value or summary Value})`` to ``folder/name``."""
    pytest.importorskip("tensorboard", reason="tensorboard is an optional dependency")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    scratch = folder.parent / f".{name}.tmp"  # written aside, then renamed in whole
    writer = EventFileWriter(str(scratch))
    for step, wall, tags in events:
        values = [
            v if isinstance(v, summary_pb2.Summary.Value) else summary_pb2.Summary.Value(tag=t, simple_value=v)
            for t, v in tags.items()
        ]
        writer.add_event(event_pb2.Event(step=step, wall_time=wall, summary=summary_pb2.Summary(value=values)))
    writer.close()
    (written,) = scratch.iterdir()
    written.rename(folder / name)
    scratch.rmdir()


def test_tensorboard_scalars_tensors_and_a_restart(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is an optional dependency")
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.util import tensor_util

    tb = tmp_path / "tensorboard_log" / "proj" / "exp"
    tb.mkdir(parents=True)
    tensor = summary_pb2.Summary.Value(tag="perf/throughput", tensor=tensor_util.make_tensor_proto(3283.5))
    histo = summary_pb2.Summary.Value(tag="actor/grad_hist", histo=summary_pb2.HistogramProto(num=1))
    write_events(
        tb,
        "events.out.tfevents.1700000000.host.1.0",
        [
            (1, 1700000010.0, {"timing_s/gen": 10.5, "mfu/actor": 0.3, "x": tensor, "h": histo}),
            (2, 1700000020.0, {"timing_s/gen": 11.5}),
        ],
    )
    write_events(tb, "events.out.tfevents.1700000100.host.2.0", [(2, 1700000110.0, {"timing_s/gen": 12.5})])
    summary = import_tensorboard([tmp_path / "tensorboard_log"], tmp_path / "run")
    df = steps(tmp_path / "run")
    assert value(df, 1, "timing_s/gen") == 10.5 and value(df, 1, "perf/mfu/actor") == pytest.approx(0.3)
    assert value(df, 1, "perf/throughput") == 3283.5
    assert value(df, 2, "timing_s/gen", attempt=1) == 12.5 and summary.restarts == 1
    assert df[df.step == 1].time.iloc[0] == 1700000010.0
    assert summary.skipped == {"non_scalar": 1}


def test_tensorboard_follow_picks_up_a_new_event_file(tmp_path):
    tb = tmp_path / "tb"
    tb.mkdir()
    write_events(tb, "events.out.tfevents.1700000000.host.1.0", [(1, 1.0, {"timing_s/gen": 1.0})])
    stop = threading.Event()

    def restart() -> None:
        time.sleep(0.3)
        write_events(tb, "events.out.tfevents.1700000100.host.2.0", [(2, 2.0, {"timing_s/gen": 2.0})])
        stop.set()

    writer = threading.Thread(target=restart)
    writer.start()
    try:
        import_tensorboard([tb], tmp_path / "run", tail=Tail(True, 0.02, max_seconds=10, stop=stop))
    finally:
        writer.join()
    assert sorted(set(steps(tmp_path / "run").step)) == [1, 2]


def test_tensorboard_needs_one_run(tmp_path, capsys):
    for run in ("a", "b"):
        (tmp_path / "tb" / run).mkdir(parents=True)
        write_events(tmp_path / "tb" / run, "events.out.tfevents.1700000000.h.1.0", [(1, 1.0, {"timing_s/gen": 1.0})])
    code, _, err = run_cli(capsys, "tensorboard", tmp_path / "tb", "--out", tmp_path / "run")
    assert code == 1 and "holds the event files of 2 runs" in err and err.count("\n") == 1


def test_tensorboard_missing_is_one_line(tmp_path, capsys, monkeypatch):
    for name in (
        "tensorboard",
        "tensorboard.backend.event_processing.event_file_loader",
        "tensorboard.compat.proto",
        "tensorboard.util",
    ):
        monkeypatch.setitem(sys.modules, name, None)
    (tmp_path / "tb").mkdir()
    code, _, err = run_cli(capsys, "tensorboard", tmp_path / "tb", "--out", tmp_path / "run")
    assert (
        code == 1
        and err == "rlscope: reading TensorBoard event files needs the tensorboard package: pip install tensorboard\n"
    )


# -- bad input: one line on stderr, never a traceback --------------------------------------


def bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    garbage = tmp / "garbage.log"
    garbage.write_bytes(bytes(range(256)) * 40)
    events = tmp / "events.out.tfevents.1700000000.host"
    events.write_bytes(bytes(range(256)) * 4)
    text = tmp / "notes.txt"
    text.write_text("no metrics here\njust words\n")
    (tmp / "empty").mkdir()
    run = tmp / "used"
    (run / "steps").mkdir(parents=True)
    (run / "steps" / "part-00000000000000000001-000001-x.parquet").write_bytes(b"")
    a_file = tmp / "a-file"
    a_file.write_text("x")
    log = str(DATA / "ansi_ray.log")
    gzipped = tmp / "x.log.gz"
    gzipped.write_bytes(gzip.compress(b"step:1 - a:1\n"))
    return {
        "missing": (["verl-log", str(tmp / "nope.log")], "no such file"),
        "directory": (["verl-log", str(tmp)], "is a directory, expected a file"),
        "binary": (["verl-log", str(garbage)], "binary data"),
        "binary-jsonl": (["verl-jsonl", str(garbage)], "binary data"),
        "binary-csv": (["wandb-csv", str(garbage)], "binary data"),
        "no-metrics": (["verl-log", str(text)], "no metrics found"),
        "gzip": (["verl-log", str(gzipped)], "gzip-compressed; decompress it first"),
        "tb-missing": (["tensorboard", str(tmp / "nope")], "no such file or directory"),
        "tb-empty": (["tensorboard", str(tmp / "empty")], "no TensorBoard event files"),
        "tb-garbage": (["tensorboard", str(events)], "no metrics found"),
        "tb-not-events": (["tensorboard", str(garbage)], "not a TensorBoard event file"),
        "run-dir-used": (["verl-log", log, "--out", str(run)], "already holds a steps table"),
        "run-dir-is-file": (["verl-log", log, "--out", str(a_file)], "is a file"),
    }


BAD_CASES = [
    "missing",
    "directory",
    "binary",
    "binary-jsonl",
    "binary-csv",
    "no-metrics",
    "gzip",
    "tb-missing",
    "tb-empty",
    "tb-garbage",
    "tb-not-events",
    "run-dir-used",
    "run-dir-is-file",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_line(tmp_path, capsys, case):
    if case.startswith("tb"):
        pytest.importorskip("tensorboard", reason="tensorboard is an optional dependency")
    args, message = bad_inputs(tmp_path)[case]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "run")]
    code, out, err = run_cli(capsys, *args)
    # an --out no run can be written to is the command line's mistake (a usage error, 2), as for simulate
    assert code == (2 if case.startswith("run-dir") else 1) and message in err and len(err.strip().splitlines()) == 1
    assert out == ""  # no summary of a run directory that was not written
    assert err.startswith("rlscope: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["csv", "x.log", "--out", "r"], "invalid choice"),
        (["verl-log", "x.log"], "--out"),
        (
            ["verl-log", "x.log", "--out", "r", "--poll", "0"],
            "--poll: expected a finite number of seconds above 0, got 0",
        ),
        (["verl-log", "x.log", "--out", "r", "--poll", "nan"], "--poll: expected a finite number of seconds above 0"),
        (["verl-log", "x.log", "--out", "r", "--meta", "[1]"], "expected a JSON object"),
        (["verl-log", "x.log", "--out", "r", "--meta", '{"gpu": {"count": -1}}'], "--meta: gpu.count"),
    ],
)
def test_usage_errors(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1


# -- run facts stated by the log ----------------------------------------------------------------

_STEP_LINE = "(TaskRunner pid=7) step:1 - timing_s/gen:40.0 - timing_s/step:100.0\n"


def _import_text(tmp_path: Path, text: str, **kw) -> tuple[dict, object]:
    log = tmp_path / "train.log"
    log.write_text(text)
    summary = import_verl_log([log], tmp_path / "run", **kw)
    return RunReader(tmp_path / "run").meta, summary


def test_launch_command_overrides_and_model_sizes_go_to_meta(tmp_path):
    text = (
        "+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae data.train_batch_size=64 "
        "'trainer.logger=[\"console\"]' actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8 "
        "trainer.nnodes=2 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct data.max_response_length=2048 "
        "+trainer.extra=1 data.train_batch_size=96\n"
        "(TaskRunner pid=3) /w/verl/trainer/main_ppo.py:227: UserWarning: set data.train_batch_size=1 to debug\n"
        "(WorkerDict pid=9) Qwen2ForCausalLM contains 7.62B parameters\n"
        "(WorkerDict pid=9) Qwen2ForTokenClassification contains 7.07B parameters\n"
        "(WorkerDict pid=9) Qwen2ForCausalLM contains 1.54B parameters\n" + _STEP_LINE
    )
    meta, summary = _import_text(tmp_path, text)
    assert meta["batch_size"] == 96  # the later override of a key wins, as in Hydra
    assert meta["group_size"] == 4 and meta["gpu"] == {"count": 16} and meta["max_response_length"] == 2048
    assert meta["model"] == {"name": "Qwen/Qwen2.5-7B-Instruct", "active_params": 7.62e9, "critic_params": 7.07e9}
    assert meta["config"]["adv_estimator"] == "gae" and "topology" not in meta
    assert "gpu.count 16" in str(summary) and "model.active_params 7.62e+09" in str(summary)


def _dump_lines(config: dict, prefix: str = "(TaskRunner pid=3) ") -> str:
    return "".join(f"{prefix}{line}\n" for line in pprint.pformat(config, width=60).splitlines())


def test_the_config_dump_wins_over_overrides_and_meta_given_wins_over_both(tmp_path):
    config = {
        "actor_rollout_ref": {"model": {"path": "/ckpt/qwen"}, "rollout": {"n": 16}},
        "algorithm": {"kl_ctrl": {"target_kl": float("inf")}, "adv_estimator": "grpo"},
        "data": {"train_batch_size": 512, "max_response_length": 8192},
        "trainer": {"n_gpus_per_node": 8, "nnodes": 4, "experiment_name": "a long name, with spaces " * 3},
    }
    dump = _dump_lines(config)
    assert "'\n" in dump and ": inf" in dump  # a string split over lines, a bare inf: as pprint prints them
    text = dump + "python3 -m verl.trainer.main_ppo data.train_batch_size=64 trainer.nnodes=1\n" + _STEP_LINE
    meta, summary = _import_text(tmp_path, text, meta={"gpu": {"type": "H100"}, "group_size": 8})
    assert meta["batch_size"] == 512 and meta["max_response_length"] == 8192  # the dump, though printed first
    assert meta["gpu"] == {"count": 32, "type": "H100"}  # merged with what --meta says
    assert meta["group_size"] == 8  # --meta wins over the log
    assert meta["model"]["name"] == "/ckpt/qwen"
    assert meta["config"]["experiment_name"] == "a long name, with spaces " * 3
    assert not summary.skipped


def test_pooled_trainers_count_both_pools(tmp_path):
    launch = (
        "python -m verl.experimental.fully_async_policy.fully_async_main trainer.nnodes=1 trainer.n_gpus_per_node=4 "
        "rollout.nnodes=1 rollout.n_gpus_per_node=4\n"
        # a generation job run afterwards is not the trainer
        "python3 -m verl.trainer.main_generation trainer.nnodes=1 trainer.n_gpus_per_node=1\n"
    )
    meta, _ = _import_text(tmp_path, launch + _STEP_LINE)
    assert meta["gpu"] == {"count": 8} and meta["split"] == {"rollout": 4, "train": 4}
    assert meta["topology"] == "async"
    dump = _dump_lines(
        {
            "actor_rollout_ref": {},
            "rollout": {"nnodes": 2, "n_gpus_per_node": 8},
            "trainer": {"nnodes": 1, "n_gpus_per_node": 8},
        }
    )
    (tmp_path / "one_step").mkdir()
    meta, _ = _import_text(tmp_path / "one_step", dump + _STEP_LINE)
    assert meta["gpu"] == {"count": 24} and meta["split"] == {"rollout": 16, "train": 8}
    assert meta["topology"] == "one_step_overlap"


def test_a_launch_continued_over_lines_and_shell_variables(tmp_path):
    text = (
        "python3 -m verl.trainer.main_ppo \\\n"
        "    data.train_batch_size=32 \\\n"
        "    actor_rollout_ref.model.path=$MODEL_PATH \\\n"
        "    trainer.nnodes=1 trainer.n_gpus_per_node=${N_GPUS} \\\n"
        "    actor_rollout_ref.rollout.n=5\n" + _STEP_LINE
    )
    meta, summary = _import_text(tmp_path, text)
    assert meta["batch_size"] == 32 and meta["group_size"] == 5
    assert "model" not in meta and "gpu" not in meta  # left to the shell: unknown, not "$MODEL_PATH"
    assert summary.steps == 1


def test_a_continued_launch_ends_at_a_step_line_another_process_or_the_end_of_its_file(tmp_path):
    text = "python3 -m verl.trainer.main_ppo data.train_batch_size=32 \\\n" + _STEP_LINE
    meta, summary = _import_text(tmp_path, text)
    assert meta["batch_size"] == 32 and summary.steps == 1
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text("python3 -m verl.trainer.main_ppo data.train_batch_size=16 \\\n")
    second.write_text("step:1 - timing_s/gen:40.0 - timing_s/step:100.0\n")
    summary = import_verl_log([first, second], tmp_path / "run2")
    assert summary.steps == 1 and RunReader(tmp_path / "run2").meta["batch_size"] == 16


def test_a_launch_wrapped_by_a_terminal_is_joined_back(tmp_path):
    text = (
        "+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=12\n"
        "8 trainer.n_gpus_per_node=8 trainer.nnodes=2 actor_rollout_ref.rollout.n=1\n"
        "6\n"
        "2025-08-02 00:35:19,831 INFO worker.py:1879 -- Started a local Ray instance.\n" + _STEP_LINE
    )
    meta, _ = _import_text(tmp_path, text)
    assert meta["batch_size"] == 128 and meta["gpu"] == {"count": 16} and meta["group_size"] == 16


def test_a_later_config_replaces_what_an_earlier_one_said(tmp_path):
    # the first log is long enough that meta.json is written before the second is read
    pooled = "python -m verl.experimental.fully_async_policy.fully_async_main trainer.nnodes=1 trainer.n_gpus_per_node=4 rollout.nnodes=1 rollout.n_gpus_per_node=4\n"
    fields = " - ".join(f"k/m{i}:1.0" for i in range(60))
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text(pooled + "".join(f"step:{s} - {fields}\n" for s in range(1, 1001)))
    second.write_text("python3 -m verl.trainer.main_ppo trainer.nnodes=1 trainer.n_gpus_per_node=2\n" + _STEP_LINE)
    summary = import_verl_log([first, second], tmp_path / "run")
    meta = RunReader(tmp_path / "run").meta
    assert summary.values > 50_000  # past one write of rows (and of meta.json)
    assert meta["gpu"] == {"count": 2} and "split" not in meta and "topology" not in meta


@pytest.mark.parametrize(
    ("lines", "active", "skipped"),
    [
        (["Qwen3MoeForCausalLM contains 30.53B parameters"], None, {"moe_total_params": 1}),
        (["Llama4ForConditionalGeneration contains 108.64B parameters"], None, {"moe_total_params": 1}),
        # Megatron prints its wrapper class and a rank's shard: neither is the model's size
        (["DistributedDataParallel contains 1.78B parameters", "GPTModel contains 1.91B parameters"], None, {}),
        (["Q: a function contains 3 parameters", "LlamaForCausalLM contains 134.52M parameters"], 134.52e6, {}),
        (["PeftModelForCausalLM contains 7.66B parameters"], 7.66e9, {}),
    ],
)
def test_which_model_size_lines_give_active_params(tmp_path, lines, active, skipped):
    meta, summary = _import_text(tmp_path, "".join(f"(WorkerDict pid=9) {x}\n" for x in lines) + _STEP_LINE)
    assert meta.get("model", {}).get("active_params") == active
    assert summary.skipped == skipped


def test_a_reward_model_is_not_taken_for_a_critic(tmp_path):
    text = (
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo\n"
        "(WorkerDict pid=9) Qwen2ForTokenClassification contains 7.07B parameters\n" + _STEP_LINE
    )
    meta, _ = _import_text(tmp_path, text)
    assert "critic_params" not in meta.get("model", {})


@pytest.mark.parametrize(
    "dump",
    [
        "(TaskRunner pid=3) {'actor_rollout_ref': {'model': <object at 0x1>},\n(TaskRunner pid=3)  'data': {}}\n",
        "(TaskRunner pid=3) {'actor_rollout_ref': {'model': {'path': 'x'},\n",  # cut short: never closes
        "(TaskRunner pid=3) {'actor_rollout_ref': {'chat': 'a { in a string',\n(TaskRunner pid=3)  'data': {}}\n",
        # the driver's own line inside a Ray worker's dump is not a wrapped piece of it
        "(TaskRunner pid=3) {'actor_rollout_ref': {'model': {'path': 'x'},\nInitial validation metrics: {'val-core/b': 1.0}\n",
    ],
)
def test_an_unreadable_config_dump_loses_nothing_after_it(tmp_path, dump):
    text = (
        dump + "(TaskRunner pid=3) Initial validation metrics: {'val-core/a/reward/mean@1': 0.25}\n"
        "(TaskRunner pid=3) step:1 - timing_s/gen:40.0 - timing_s/step:100.0\n"
    )
    _, summary = _import_text(tmp_path, text, strict=True)
    df = steps(tmp_path / "run")
    assert value(df, 0, "val-core/a/reward/mean@1") == 0.25 and value(df, 1, "timing_s/gen") == 40.0
    assert summary.skipped == {"unreadable_config_dump": 1}


def test_a_dump_of_another_process_never_displaces_an_open_metrics_dict(tmp_path):
    text = (
        "(TaskRunner pid=3) Initial validation metrics: {'critic/x': 1.0,\n"
        "(WorkerDict pid=4) {'actor_rollout_ref': {'rollout': {'n': 4}},\n"
        "(TaskRunner pid=3)  'critic/y': 2.0}\n"
        "(TaskRunner pid=3) step:1 - timing_s/gen:40.0 - timing_s/step:100.0\n"
    )
    _, summary = _import_text(tmp_path, text)
    df = steps(tmp_path / "run")
    assert value(df, 0, "critic/x") == 1.0 and value(df, 0, "critic/y") == 2.0
    assert summary.skipped == {"unreadable_config_dump": 1}


def test_a_dump_cut_short_by_the_end_of_the_log_is_counted_as_one(tmp_path):
    text = _STEP_LINE + "(TaskRunner pid=3) {'actor_rollout_ref': {'model': {'path': 'x'},\n"
    _, summary = _import_text(tmp_path, text)
    assert summary.skipped == {"unreadable_config_dump": 1} and summary.steps == 1


def test_metric_dicts_named_like_config_sections_are_metrics(tmp_path):
    text = "{'critic/score/mean': 0.25, 'critic/rewards/mean': 0.5}\nstep:3 - timing_s/gen:40.0 - timing_s/step:100.0\n"
    _import_text(tmp_path, text)
    assert value(steps(tmp_path / "run"), 2, "critic/score/mean") == 0.25


def test_odd_config_values_never_stop_the_import(tmp_path):
    text = (
        "{'actor_rollout_ref': {[1]: 2, 'rollout': {'n': 4}}, 'trainer': {'experiment_name': nan}}\n"
        "python3 -m verl.trainer.main_ppo trainer.experiment_name=nan data.train_batch_size=" + "9" * 400 + "\n"
        "python3 -m verl.trainer.main_ppo " + "x" * 200_000 + " data.train_batch_size=4\n" + _STEP_LINE
    )
    meta, summary = _import_text(tmp_path, text)
    assert meta["group_size"] == 4 and "experiment_name" not in meta.get("config", {})
    assert "batch_size" not in meta  # 400 digits are not a batch size; a 200 kB line is not a launch
    assert summary.steps == 1


def test_overrides_parse_as_hydra_reads_them(tmp_path):
    cfg = config_from_overrides(
        [
            "a.b=1",
            "++a.c=2.5",
            "+a.d=true",
            "a.e=null",
            "a.f='x y'",
            "a.g=${oc.env:X}",
            "a.h=nan",
            "plain=1",
            "-m",
            "a.b=3",
        ]
    )
    assert cfg == {"a": {"b": 3, "c": 2.5, "d": True, "e": None, "f": "x y", "h": "nan"}}
    for script in (
        "python3 verl/trainer/main_ppo.py data.train_batch_size=8",
        "torchrun -m recipe.dapo.main_dapo data.train_batch_size=16",
    ):
        (tmp_path / script.split()[0]).mkdir()
        meta, _ = _import_text(tmp_path / script.split()[0], script + "\n" + _STEP_LINE)
        assert meta["batch_size"] == int(script.rpartition("=")[2])


def test_an_out_directory_that_cannot_be_made_is_refused_before_reading(tmp_path, capsys, monkeypatch):
    log = tmp_path / "x.log"
    log.write_text("step:1 - a:1\n")
    (tmp_path / "afile").write_text("")
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "afile" / "run")
    assert (
        code == 1
        and err == f"rlscope: {tmp_path / 'afile' / 'run'}: cannot create it, {tmp_path / 'afile'} is a file\n"
    )
    import rlscope.collectors.importers._sink as sink_module

    monkeypatch.setattr(sink_module.os, "access", lambda *_args: False)  # as a read-only folder is to a user
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "new" / "run")
    assert (
        code == 1
        and err
        == f"rlscope: {tmp_path / 'new' / 'run'}: cannot write there, {tmp_path} is not writable (permission denied)\n"
    )


def test_a_full_disk_is_one_line_naming_the_run_and_what_it_holds(tmp_path, capsys, monkeypatch):
    import rlscope.collectors.importers._sink as sink_module

    real_write = sink_module.write_segment
    calls = []

    def fills_the_disk(*args, **kwargs):
        calls.append(args)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")  # as the OS says it: no file named
        return real_write(*args, **kwargs)

    monkeypatch.setattr(sink_module, "write_segment", fills_the_disk)
    log = tmp_path / "x.log"
    log.write_text("step:1 - a:1\n")
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "one")
    assert code == 0 and len(calls) == 1
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "two")
    expected = (
        f"rlscope: {tmp_path / 'two'}: cannot write (No space left on device); nothing of this import was written\n"
    )
    assert code == 1 and err == expected and not (tmp_path / "two").exists()  # as before the import
    (tmp_path / "hand").mkdir()
    (tmp_path / "hand" / "meta.json").write_text('{"gpu": {"type": "H100"}}')  # written by hand: kept byte for byte
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "hand")
    assert code == 1 and (tmp_path / "hand" / "meta.json").read_text() == '{"gpu": {"type": "H100"}}'
    assert os.listdir(tmp_path / "hand") == ["meta.json"]  # the steps folder it made is gone

    def refuses(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sink_module, "write_atomic_bytes", refuses)  # meta.json cannot be put back either
    code, _, err = run_cli(capsys, "verl-log", log, "--out", tmp_path / "hand")
    assert code == 1 and err.endswith("; no steps were written, but meta.json holds this import's record\n")
    assert json.loads((tmp_path / "hand" / "meta.json").read_text())["importer"]["name"] == "verl-log"

    calls.clear()
    sink = StepSink(tmp_path / "three", importer="verl-log", sources=["x"], flush_rows=2)
    sink.add(1, {"a": 1.0, "b": 2.0})  # two values: a segment
    with pytest.raises(RunDirError, match=r"; steps up to 1 were written; import again into a new directory$"):
        sink.add(2, {"a": 1.0, "b": 2.0})
    assert RunReader(tmp_path / "three").read("steps").num_rows == 2


def test_a_log_given_as_a_pipe_loses_no_line_to_the_look_at_its_head(tmp_path):
    fifo = tmp_path / "piped.log"
    os.mkfifo(fifo)
    data = "".join(f"step:{s} - a:{s}\n" for s in range(1, 2001)).encode()  # 20 kB: more than the look

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    # in a child: a reader that opened the pipe twice would wait for a second writer for ever
    done = subprocess.run(
        [sys.executable, "-m", "rlscope", "import", "verl-log", str(fifo), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    writer.join(5)
    assert done.returncode == 0 and "2000 steps (1..2000)" in done.stdout
    assert value(steps(tmp_path / "run"), 1, "a") == 1.0


def test_meta_given_that_disagrees_with_the_log_is_said_at_import(tmp_path, capsys):
    # --meta alone is valid; with the 2 x 8 GPUs the launch command states, its split is not
    log = tmp_path / "x.log"
    log.write_text(
        "python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=8 trainer.nnodes=2\nstep:1 - timing_s/gen:1.0\n"
    )
    code, out, _ = run_cli(
        capsys, "verl-log", log, "--out", tmp_path / "run", "--meta", '{"topology": "separated", "split": "4:4"}'
    )
    assert code == 0 and "meta.json: split 4:4 adds up to 8 GPUs, not the run's 16; the analyzers will ignore it" in out
    code, out, _ = run_cli(
        capsys, "verl-log", log, "--out", tmp_path / "ok", "--meta", '{"topology": "separated", "split": "12:4"}'
    )
    assert code == 0 and "the analyzers will ignore" not in out


def test_a_meta_json_that_does_not_parse_is_never_replaced_by_an_import(tmp_path, capsys):
    log = tmp_path / "x.log"
    log.write_text("step:1 - timing_s/gen:1.5\n")
    run = tmp_path / "run"
    run.mkdir()
    typo = '{"schema_version": 1, "gpu": {"type": "H100", "count": 8},}'  # a trailing comma
    (run / "meta.json").write_text(typo)
    code, out, err = run_cli(capsys, "verl-log", log, "--out", run)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"rlscope: {run / 'meta.json'}: not valid JSON") and "the import would replace it" in err
    assert (run / "meta.json").read_text() == typo and not (run / "steps").exists()


def test_a_hand_written_meta_json_is_merged_into(tmp_path, capsys):
    log = tmp_path / "x.log"
    log.write_text("step:1 - timing_s/gen:1.5\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text('{"gpu": {"type": "H100", "count": 8}}')  # no schema_version
    code, _, _ = run_cli(capsys, "verl-log", log, "--out", run)
    meta = RunReader(run).meta
    assert code == 0 and meta["gpu"] == {"type": "H100", "count": 8} and meta["importer"]["steps"] == 1


def test_gzip_through_a_pipe_is_named_as_on_stdin(tmp_path, capsys):
    fifo = tmp_path / "piped.log"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(gzip.compress(b"step:1 - a:1\n" * 100))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, out, err = run_cli(capsys, "verl-log", fifo, "--out", tmp_path / "run")
    writer.join(5)
    assert code == 1 and out == "" and not (tmp_path / "run").exists()
    assert err == f"rlscope: {fifo}: gzip-compressed; decompress it in the pipe: <(zcat FILE.gz)\n"


def test_the_summary_says_one_step_in_the_singular(tmp_path):
    log = tmp_path / "one.log"
    log.write_text("step:4 - timing_s/gen:2.5\n")
    summary = import_verl_log([str(log)], str(tmp_path / "run"))
    assert str(summary).startswith("verl-log: 1 step (4..4), 1 key, 1 value -> ")
    assert "read 1 line from 1 source; 1 metric record" in str(summary)


def test_the_summary_says_which_steps_are_validation_only(tmp_path):
    # verl's val_before_train: step 0 holds validation (and its testing timer) only, no training
    # step, as diagnose counts them; step 1's validation comes in a line of its own after its training
    summary, _ = import_lines(
        tmp_path,
        "step:0 - val-core/gsm8k/reward/mean@1:0.1 - timing_s/testing:4.0",
        "step:1 - timing_s/gen:2.5 - timing_s/step:3.0",
        "step:1 - val-core/gsm8k/reward/mean@1:0.2",
        "step:2 - timing_s/gen:2.5 - timing_s/step:3.0",
    )
    assert str(summary).startswith("verl-log: 3 steps (0..2; step 0 validation only), 4 keys, 7 values -> ")


def test_a_step_whose_training_comes_after_its_validation_is_no_validation_step(tmp_path):
    summary, _ = import_lines(
        tmp_path,
        "step:1 - val-core/gsm8k/reward/mean@1:0.2",
        "step:1 - timing_s/gen:2.5 - timing_s/step:3.0",
        "step:2 - timing_s/gen:2.5 - timing_s/step:0",  # a step timer of 0 timed nothing, gen did
    )
    assert str(summary).startswith("verl-log: 2 steps (1..2), 3 keys, 5 values -> ")


def test_a_log_imported_in_the_other_verl_format_is_told_which_to_use(tmp_path, capsys):
    console = tmp_path / "train.log"
    console.write_text("(TaskRunner pid=1) step:1 - timing_s/gen:10.0 - timing_s/step:15.0\n")
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text(json.dumps({"step": 1, "data": {"timing_s/gen": 10.0}}) + "\n")
    words = tmp_path / "notes.txt"
    words.write_text("no metrics here\n")
    for fmt, source, hint in (
        ("verl-jsonl", console, "; it reads as a verl console log: rlscope import verl-log"),
        ("verl-log", jsonl, "; it reads as verl's JSONL: rlscope import verl-jsonl"),
        ("verl-log", words, ""),  # neither: no guess
    ):
        code, _, err = run_cli(capsys, fmt, source, "--out", tmp_path / f"{fmt}-{source.name}")
        assert code == 1 and err.rstrip("\n").endswith(")" + hint)


def test_tensorboard_keeps_the_record_tail_it_merged_with_the_fully_async_final_window(tmp_path):
    # TensorBoard splits update 2's record (logged at step 3) at the window's utilization it repeats; its
    # tail, dynamic_resource/resource_utilization, then merges with the final window that follows. The
    # window is left out; the tail is kept at step 3, with the last update's own value logged after it
    records = fully_async_records(3, sync_every=1, test_freq=2)
    import_tensorboard([_fully_async_export(tmp_path, records, "tensorboard")], tmp_path / "run", strict=True)
    df = steps(tmp_path / "run")
    (update_2,) = [d for s, d in records if s == 3 and d.get("training/global_step") == 2]
    (update_3,) = [d for s, d in records if s == 3 and d.get("training/global_step") == 3]
    kept = df[(df.step == 3) & (df.key == "dynamic_resource/resource_utilization")]
    key = "dynamic_resource/resource_utilization"
    assert sorted(kept.value) == pytest.approx(sorted([update_2[key], update_3[key]]))


def test_a_step_two_restarts_logged_again_is_one_step_logged_again(tmp_path, capsys):
    # steps 1-3, a restart back to 2, another back to 2: steps 1..3, and 2 and 3 logged again (twice
    # for 2, once for 3): two steps logged again, not three
    log = tmp_path / "train.log"
    lines = ["step:1 - timing_s/step:10.0", "step:2 - timing_s/step:10.0", "step:3 - timing_s/step:10.0"]
    lines += ["step:2 - timing_s/step:11.0", "step:3 - timing_s/step:11.0", "step:2 - timing_s/step:12.0"]
    log.write_text("\n".join(lines) + "\n")
    code, out, _ = run_cli(capsys, "verl-log", log, "--out", tmp_path / "run")
    assert code == 0 and out.startswith("verl-log: 3 steps (1..3; 2 logged again after restarts)")
    importer = RunReader(tmp_path / "run").meta["importer"]
    assert (importer["restarts"], importer["steps"], importer["steps_logged_again"]) == (2, 3, 2)

"""`rlscope diagnose`: every format, exit codes, escaping of data strings, logs as input,
and the simulator's injected faults recovered on every sample trace."""

from __future__ import annotations

import builtins
import fnmatch
import io
import json
import math
import os
import re
import shutil
import sys
import threading
from html import unescape
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from damage import damage_column
from fully_async_log import fully_async_records, rollouter_window, update_metrics

from rlscope import Recorder, RunReader
from rlscope.analyzers import analyze_run
from rlscope.analyzers._data import out_of_range_shares, unfinite_timers
from rlscope.cli import main
from rlscope.report.document import SCHEMA, build_document

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
# shared/ lies beside the repository; RLSCOPE_REAL_LOGS points elsewhere, as in test_importers
REAL_LOGS = Path(os.environ.get("RLSCOPE_REAL_LOGS", ROOT.parent / "shared" / "real_logs"))


def _run_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["diagnose", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_json_document_has_the_documented_shape(capsys):
    code, doc = _run_json(capsys, str(SAMPLES / "longtail-8b"))
    assert code == 0
    assert doc["schema"] == "rlscope.diagnose/2"
    assert set(doc) >= {
        "run",
        "headline",
        "findings",
        "counts",
        "phases",
        "long_tail",
        "mfu",
        "topology",
        "split_drift",
    }
    assert doc["run"]["gpu_count"] == 64 and doc["run"]["steps"] == 10
    head = doc["headline"]
    # DOMAIN.md's 8B ledger: step ~810 s, tail share 196/602 = 0.33, MFU 13%, async 42:22 at ~619 s
    assert head["step_s"] == pytest.approx(810, rel=0.05)
    assert head["tail_share"] == pytest.approx(196 / 602, abs=0.03)
    assert head["mfu"] == pytest.approx(0.13, abs=0.01)
    best = head["best_topology"]
    assert (best["topology"], best["n_rollout"], best["n_train"]) == ("async_streaming", 42, 22)
    assert best["step_s"] == pytest.approx(619, rel=0.05)
    assert sum(doc["counts"].values()) == len(doc["findings"])
    ids = [f["id"] for f in doc["findings"]]
    assert "long-tail-dominates" in ids and "async-recommended" in ids
    waterfall = doc["mfu"]["waterfall_points"]
    assert sum(waterfall.values()) + 100 * doc["mfu"]["mfu"] == pytest.approx(100)


DOC = ROOT / "docs" / "diagnose-json.md"


def _doc_part(text: str, title: str) -> str:
    """The text of one ``## title`` section of docs/diagnose-json.md."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _names(text: str) -> set[str]:
    """Every name written in backticks in ``text``: `a`, `{a, b}`, `prob_diff_*`."""
    return {n for inner in re.findall(r"`([^`]+)`", text) for n in re.findall(r"[A-Za-z_][\w*]*", inner)}


def _table(part: str) -> dict[str, str]:
    """A doc table's rows: each field named in the first cell -> the rest of its row."""
    rows = {}
    for line in part.splitlines():
        if line.startswith("| `"):
            first, rest = line[2:].split(" | ", 1)
            rows.update(dict.fromkeys(re.findall(r"`(\w+)`", first), rest))
    return rows


def _keys(value) -> set[str]:
    """The keys of every object inside ``value``, at any depth (records of arrays included)."""
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


def _documented(name: str, names: set[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, n) for n in names)


def test_every_json_field_is_in_docs_diagnose_json_md(tmp_path, capsys):
    # sample runs (trajectories, NVML, histograms, rewards), and a verl JSONL log without them
    # (staleness and mismatch from verl's scalars, an estimated tail): every key of each
    # document must be where docs/diagnose-json.md describes its section
    jsonl = tmp_path / "metrics.jsonl"
    scalars = {
        "timing_s/gen": 50.0,
        "timing_s/update_actor": 10.0,
        "timing_s/step": 70.0,
        "response_length/mean": 1000.0,
        "response_length/max": 4000.0,
        "training/rollout_probs_diff_max": 0.1,
        "training/rollout_probs_diff_mean": 0.001,
        "training/rollout_probs_diff_std": 0.002,
        "training/off_policy/trajectory_staleness_worst/mean": 1.5,
        "training/off_policy/trajectory_staleness_worst/max": 3.0,
        "training/off_policy/trajectory_staleness_worst/min": 0.0,
        "training/off_policy/trajectory_staleness/mean": 0.5,
        "training/off_policy/trajectory_staleness/max": 1.0,
        "training/off_policy/trajectory_staleness/min": 0.0,
    }
    jsonl.write_text("".join(json.dumps({"step": s, "data": scalars}) + "\n" for s in range(1, 9)))
    docs = [_run_json(capsys, str(SAMPLES / s))[1] for s in ("agentic-failing-reward", "async-drift", "moe-mismatch")]
    docs.append(_run_json(capsys, str(jsonl), "--gpus", "8", "--gpu-type", "H100", "--active-params", "7e9")[1])
    assert docs[-1]["staleness"]["source"] == "verl" and docs[-1]["logprob_mismatch"]["source"] == "verl-scalars"
    # each number verl gave, under its column, and which metric it came from
    lags = docs[-1]["staleness"]
    got = {c: lags["per_step"][-1][c] for c in ("mean", "max", "min", "end_mean", "end_max", "end_min")}
    assert got == {"mean": 1.5, "max": 3.0, "min": 0.0, "end_mean": 0.5, "end_max": 1.0, "end_min": 0.0}
    assert lags["verl_keys"]["min"] == "training/off_policy/trajectory_staleness_worst/min"
    assert lags["verl_keys"]["end_mean"] == "training/off_policy/trajectory_staleness/mean"
    assert docs[1]["staleness"]["source"] == "trajectories" and docs[1]["staleness"]["verl_keys"] == {}

    text = DOC.read_text()
    top = _table(_doc_part(text, "Top level"))
    headline = _table(_doc_part(text, "`headline`"))
    run = _names(_doc_part(text, "`run`"))
    finding = json.loads(re.search(r"```json\n(.*?)```", _doc_part(text, "`findings[]`"), re.S).group(1))
    assert f"`{SCHEMA}`" in top["schema"]
    for doc in docs:
        assert set(doc) == set(top)
        assert set(doc["headline"]) == set(headline)
        assert _keys(doc["headline"]["best_topology"]) <= _names(headline["best_topology"])
        assert _keys(doc["run"]) <= run
        assert all(set(f) == set(finding) for f in doc["findings"])
        for field, row in top.items():
            if field not in ("run", "headline", "findings"):  # their own sections; evidence depends on the id
                undocumented = {k for k in _keys(doc[field]) if not _documented(k, _names(row))}
                assert not undocumented, f"{field}: {sorted(undocumented)} not in docs/diagnose-json.md"


def test_the_readme_excerpt_is_what_diagnose_prints(capsys):
    # README.md's "What a diagnosis looks like": its lines, in order, each as printed (a line
    # that ends in "..." as the start of the printed one; a line of "..." stands for any lines)
    readme = (ROOT / "README.md").read_text().split("## What a diagnosis looks like", 1)[1]
    excerpt = readme.split("```\n", 2)[1].splitlines()
    assert main(["diagnose", str(SAMPLES / "agentic-failing-reward")]) == 0
    printed = iter(line.rstrip() for line in capsys.readouterr().out.splitlines())
    for line in excerpt:
        if line.strip() == "...":
            continue
        start = line.removesuffix("...").rstrip() if line.endswith("...") else None
        assert any(out == line or (start is not None and out.startswith(start)) for out in printed), line


def test_a_text_report_to_a_file_or_a_pipe_has_no_padding_at_line_ends(tmp_path, capsys):
    # rich pads every table line to the console's width: in a file or a pull-request comment that is
    # trailing blanks on most lines (the headline and the findings are tables)
    out = tmp_path / "report.txt"
    assert main(["diagnose", str(SAMPLES / "longtail-8b"), "-o", str(out)]) == 0
    assert main(["diagnose", str(SAMPLES / "longtail-8b")]) == 0  # stdout captured: not a terminal
    for text in (out.read_text(), capsys.readouterr().out):
        assert "Headline" in text and "Findings" in text
        assert [line for line in text.splitlines() if line != line.rstrip()] == []


def test_fail_on_sets_exit_code_3(capsys):
    agentic = str(SAMPLES / "agentic-failing-reward")  # has a critical finding (engine imbalance)
    assert main(["diagnose", agentic, "--format", "json", "--fail-on", "critical"]) == 3
    healthy = str(SAMPLES / "healthy-colocated")  # only info findings
    assert main(["diagnose", healthy, "--format", "json", "--fail-on", "warn"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_every_format_writes_a_file(tmp_path, fmt):
    out = tmp_path / f"report.{fmt}"
    assert main(["diagnose", str(SAMPLES / "agentic-failing-reward"), "--format", fmt, "--output", str(out)]) == 0
    text = out.read_text()
    assert "swe-sandbox" in text  # the failing reward source is named in every format
    if fmt == "html":
        assert text.startswith("<!DOCTYPE html>")
        assert not re.search(r"<script[^>]+src=", text)  # self-contained: opens offline
        assert "Plotly.newPlot" in text and text.count("Plotly.newPlot") >= 4
    if fmt == "text":
        assert "MFU waterfall" in text and "█" in text


def test_every_format_says_the_step_range_and_the_shares_as_compare_does(tmp_path, capsys):
    # timed steps 2, 5 and 9 (a log may time only some steps of its range), generation 56.3 s of a
    # 100 s step: 56% to the whole percent in every format, and in compare's table too
    log = tmp_path / "train.log"
    log.write_text(
        "".join(f"step:{s} - timing_s/gen:56.3 - timing_s/update_actor:43.7 - timing_s/step:100.0\n" for s in (2, 5, 9))
    )
    reports = []
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--format", fmt]) == 0
        reports.append(capsys.readouterr().out)
    text, markdown, html = reports
    assert "  verl | colocated | steps 2..9 (3 timed)\n" in text
    assert "- **steps**: 2..9 (3 timed)\n" in markdown
    assert "<th>steps</th><td>2..9 (3 timed)</td>" in html
    assert re.search(r"^  generation +56% of each step$", text, re.MULTILINE)
    assert "| generation | 56% of each step |" in markdown
    assert main(["compare", str(log), str(log)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│ generation / step ")]
    assert [cell.strip() for cell in row.split("│")[2:4]] == ["56%", "56%"]


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_generation_beside_the_step_is_not_a_share_of_it(tmp_path, fmt):
    # async generation runs beside the trainer's step: its seconds per batch, not "236% of each step"
    async_out, colocated_out = tmp_path / "async", tmp_path / "colocated"
    assert main(["diagnose", str(SAMPLES / "async-drift"), "--format", fmt, "--output", str(async_out)]) == 0
    assert main(["diagnose", str(SAMPLES / "longtail-8b"), "--format", fmt, "--output", str(colocated_out)]) == 0
    doc = build_document(analyze_run(str(SAMPLES / "async-drift")), RunReader(SAMPLES / "async-drift"), "x")
    head = doc["headline"]
    assert head["generation_overlapped"] and head["generation_share"] > 1
    # the generation timer's own recent mean, not a mean of per-step shares times the mean step
    seconds = analyze_run(str(SAMPLES / "async-drift")).anatomy.seconds["gen"]
    assert head["generation_s"] == pytest.approx(seconds.iloc[-len(seconds) // 4 :].mean())
    per_batch = f"{head['generation_s']:,.0f} s per batch, beside the step"
    assert (
        per_batch in async_out.read_text() and "of each step" not in async_out.read_text().split("generation")[1][:60]
    )
    assert re.search(r"generation\W+\d+% of each step", colocated_out.read_text())


@pytest.mark.parametrize("trace", ["async-drift", "moe-mismatch", "longtail-8b"])
def test_the_phase_stack_adds_up_to_the_step(trace):
    # overlapped generation is not stacked on the wait that stands for it (2,559 s bars on a 795 s step)
    import numpy as np

    from rlscope.report.figures import phase_stack

    d = analyze_run(str(SAMPLES / trace))
    stacked = sum(np.asarray(bar.y, dtype=float) for bar in phase_stack(d).data)
    assert stacked == pytest.approx(d.anatomy.seconds["step"].to_numpy(), rel=1e-6)


def test_recent_phase_shares_are_the_headline_s_ratio_of_means(tmp_path, capsys):
    run = str(tmp_path / "varying")
    with Recorder(run) as rec:  # 8 steps: the last quarter is steps 6-7
        for step, (gen, step_s) in enumerate([(10, 20)] * 6 + [(90, 100), (10, 20)]):
            rec.log_step(step, {"timing_s/gen": gen, "timing_s/update_actor": 5, "timing_s/step": step_s})
    code, doc = _run_json(capsys, run)
    # steps 6-7: generation (90 + 10) / 2 = 50 s of (100 + 20) / 2 = 60 s; training 5 of 60 (per-step
    # ratios would give (0.9 + 0.5) / 2 = 0.7 and 0.15 / 2)
    assert code == 0 and doc["headline"]["generation_share"] == pytest.approx(50 / 60)
    shares = doc["phases"]["recent_shares"]
    assert shares["gen"] == pytest.approx(50 / 60) and shares["update_actor"] == pytest.approx(5 / 60)


@pytest.mark.parametrize(
    ("lengths", "says", "share"),
    [
        # mean x ln 10 past the max: no estimate; at most (256 - 232) / (0.9 x 256) = 10%
        ({"response_length/mean": 232.0, "response_length/min": 91.0}, "at most 10% of rollout", None),
        # 20% of responses at the cap: the slowest 10% stop there together, if they decode in one wave
        ({"response_length/mean": 93.0, "response_length/clip_ratio": 0.2}, "hit the length cap", 0.0),
    ],
)
def test_an_estimated_tail_says_what_the_lengths_support(tmp_path, capsys, lengths, says, share):
    log = tmp_path / "metrics.jsonl"
    data = {"timing_s/gen": 23.0, "timing_s/update_actor": 40.0, "response_length/max": 256.0, **lengths}
    log.write_text("".join(json.dumps({"step": s, "data": data}) + "\n" for s in range(1, 5)))
    code, doc = _run_json(capsys, str(log))
    assert code == 0 and doc["headline"]["tail_estimated"] and doc["headline"]["tail_share"] == share
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert says in out
        if share is None:  # not "0% of rollout", the quickstart's old headline
            assert not re.search(r"(?<![\d.])0% of rollout", out)


@pytest.mark.parametrize("unfinished", [0, 2])
def test_one_trajectory_a_step_has_no_tail_and_says_why(tmp_path, capsys, unfinished):
    # beside it, trajectories that never finished (infinite times) are not counted: still one
    run = str(tmp_path / "one")
    with Recorder(run) as rec:
        for step in range(4):
            rec.log_step(step, {"timing_s/gen": 10, "timing_s/update_actor": 5, "timing_s/step": 16})
            rec.log_trajectories(step, [{"finish_time": 9.0}] + [{"finish_time": float("inf")}] * unfinished)
    code, doc = _run_json(capsys, run)
    assert code == 0 and doc["headline"]["tail_share"] is None and doc["long_tail"]["per_step"][0]["n"] == 1
    assert main(["diagnose", run]) == 0
    assert "n/a (one trajectory a step: no slowest 10% to wait for)" in capsys.readouterr().out
    assert main(["diagnose", run, "--format", "html"]) == 0
    assert "90% finished" not in capsys.readouterr().out  # no t90 to mark


def test_a_run_without_a_what_if_says_what_it_needs(tmp_path, capsys):
    run = str(tmp_path / "nogpus")
    with Recorder(run) as rec:  # no meta.json GPU count
        for step in range(4):
            rec.log_step(step, {"timing_s/gen": 10, "timing_s/update_actor": 5, "timing_s/step": 16})
    code, doc = _run_json(capsys, run)
    need = "the what-if needs the run's GPU count, meta.json gpu.count"
    assert code == 0 and doc["headline"]["best_topology"] is None and doc["topology"]["missing"] == need
    assert main(["diagnose", run]) == 0 and f"n/a ({need})" in capsys.readouterr().out
    code, doc = _run_json(capsys, run, "--gpus", "8")
    assert doc["topology"]["missing"] is None and doc["headline"]["best_topology"] is not None


def _hostile_run(tmp_path) -> str:
    """A failing reward source and a metric key whose names are markup."""
    run = str(tmp_path / "hostile")
    evil = "<script>alert('x')</script>**bold**[link](http://e)|cell"
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        for step in range(4):
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/update_actor": 5.0, "<b>key</b>": 1.0})
            rows = [{"data_source": evil, "reward": None, "reward_status": "error", "reward_error": "<i>E</i>"}] * 5
            rows += [{"data_source": evil, "reward": 1.0, "reward_status": "ok"}] * 5
            rec.log_trajectories(step, rows)
    return run


def test_every_format_has_the_what_if_and_reward_tables(tmp_path):
    run = str(SAMPLES / "agentic-failing-reward")
    doc = build_document(analyze_run(run), RunReader(run), run)
    best = doc["headline"]["best_topology"]
    split, speed = f"{best['n_rollout']}:{best['n_train']}", f"{best['speedup']:.2f}x"
    (swe,) = [r for r in doc["rewards"]["by_source"] if r["source"] == "swe-sandbox"]
    for fmt in ("text", "markdown", "html"):
        out = tmp_path / fmt
        assert main(["diagnose", run, "--format", fmt, "-o", str(out)]) == 0
        text = out.read_text()
        what_if = text.split("Topology what-if")[1].split("Reward by source")[0]
        assert "async streaming" in what_if and split in what_if and speed in what_if, fmt
        rewards = text.split("Reward by source")[1]
        assert f"{swe['error_rate']:.1%}" in rewards and f"{swe['recent_mean_reward']:.3f}" in rewards, fmt


def test_control_characters_are_shown_not_sent_to_a_terminal(tmp_path, capsys):
    from rlscope.report.markdown import escape_md

    # a source named with a colour code and a line break: `cat report.md` or the text report
    # must not recolour the terminal, and a table row must not end early; other characters
    # (an ideographic space, a zero-width joiner in an emoji) are text and stay as they are
    assert escape_md("evil\x1b[31mred\nnl") == r"evil\x1b\[31mred nl"
    assert escape_md("gsm8k\u3000jp \U0001f469\u200d\U0001f4bb") == "gsm8k\u3000jp \U0001f469\u200d\U0001f4bb"
    run = tmp_path / "run"
    with Recorder(run, meta={"importer": {"name": "x\x1b[2Jy", "skipped": {"bad\x07": 2, "flag": True}}}) as rec:
        for step in (1, 2):
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 12.0})
            rows = [{"finish_time": float(i), "data_source": "evil\x1b[31mred", "reward": 1.0} for i in range(10)]
            # a failing source: its error code reaches the finding's recommendation
            rows += [{"data_source": "evil\x1b[31mred", "reward_status": "error", "reward_error": "E\x1b[0m"}] * 10
            rec.log_trajectories(step, rows)
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(run), "--format", fmt, "-o", str(tmp_path / fmt)]) == 0
        out = (tmp_path / fmt).read_text()
        assert "\x1b" not in out and "\x07" not in out, fmt
        assert "evil\\x1b" in out and "the import (x\\x1b" in out and "2 bad\\x07" in out, fmt
        assert "True flag" not in out and "1 flag" not in out, fmt  # True is not a count
        assert "mostly E\\x1b[0m" in out.replace("\\[", "["), fmt


def test_data_strings_are_escaped_in_html_and_markdown(tmp_path, capsys):
    run = _hostile_run(tmp_path)
    assert main(["diagnose", run, "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<i>E</i>" not in page
    assert main(["diagnose", run, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert r"\*\*bold\*\*\[link\](http://e)\|cell" in md
    assert main(["diagnose", run]) == 0  # text: shown literally, markup not interpreted
    text = capsys.readouterr().out
    assert "<script>alert('x')</script>**bold**[link](http://e)|cell" in text


def test_a_segment_that_does_not_read_is_named_in_every_report(tmp_path, capsys):
    run = tmp_path / "<b>run</b>*x*"
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}, "batch_size": "many"}) as rec:
        for step in (1, 2):
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 12.0})
            rec.log_trajectories(
                step, [{"finish_time": float(i), "reward": 1.0, "data_source": "m"} for i in range(20)]
            )
            rec.flush()  # a segment per step
    first = sorted((run / "trajectories").glob("*.parquet"))[0]
    damage_column(first, "reward")
    code, doc = _run_json(capsys, str(run))
    assert code == 0
    assert doc["long_tail"]["estimated"] is False  # the damaged segment's finish times still count
    by_step = [(r["step"], r["n"], r["scored"]) for r in doc["rewards"]["by_step"]]
    assert by_step == [(1, 20, 0), (2, 20, 20)]  # its rewards do not: its rows are there, unscored
    ignored, unread = doc["run"]["warnings"]
    assert ignored == "meta.json: batch_size is 'many', not a positive whole number; ignored"
    assert str(first) in unread and "unreadable data in reward" in unread
    assert unread.isprintable()  # the decoder's message quotes raw bytes: not sent to a terminal
    assert main(["diagnose", str(run), "--format", "markdown"]) == 0
    md = capsys.readouterr().out.split("## Read with warnings")[1]
    assert r"&lt;b&gt;run&lt;/b&gt;\*x\*" in md and "<b>" not in md
    assert main(["diagnose", str(run), "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text().split("Read with warnings")[1]
    assert "&lt;b&gt;run&lt;/b&gt;*x*" in page and "<b>run" not in page
    assert main(["diagnose", str(run)]) == 0
    assert str(first) in capsys.readouterr().out.split("Read with warnings")[1]  # not wrapped: copyable


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found (set RLSCOPE_REAL_LOGS)")
def test_a_verl_console_log_is_imported_and_diagnosed(capsys):
    code, doc = _run_json(capsys, str(REAL_LOGS / "12_charcount_grpo_smollm135m_1gpu.log"))
    assert code == 0
    assert doc["run"]["framework"] == "verl" and doc["run"]["first_step"] == 1
    # step 1 of that log: timing_s/step 48.70, gen 16.23 -> generation share 33%
    assert doc["headline"]["step_s"] == pytest.approx(48.70, abs=0.01)
    assert doc["headline"]["generation_share"] == pytest.approx(16.23 / 48.70, abs=0.005)
    assert doc["headline"]["tail_estimated"] is True
    # the log states 1 GPU, 128 prompts x 8 samples and a 134.52M-parameter actor: with an A100's
    # 312 TFLOP/s, MFU = tokens x 10N (generation and old logprob 2N each, the update 6N; GRPO
    # without a ref model) / (step time x peak), with step 1's mean prompt and response lengths
    _, doc = _run_json(capsys, str(REAL_LOGS / "12_charcount_grpo_smollm135m_1gpu.log"), "--gpu-type", "A100")
    tokens = (63.03125 + 93.126953125) * 128 * 8
    assert doc["headline"]["mfu"] == pytest.approx(tokens * 10 * 134.52e6 / (48.7025266494602 * 312e12))


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found (set RLSCOPE_REAL_LOGS)")
def test_a_run_with_no_reward_signal_is_critical(capsys):
    # rllm issue 54: critic/score and critic/advantages are all 0.000 at step 4
    _, doc = _run_json(capsys, str(REAL_LOGS / "07_rllm54_zero_reward_step4.log"))
    (f,) = [f for f in doc["findings"] if f["id"] == "reward-no-signal"]
    assert f["severity"] == "critical" and f["evidence"]["last_step"] == 4 and f["evidence"]["reward"] == 0.0
    assert f["title"] == "every sample of the last step got reward 0"  # not "the last 1 step(s)"
    (overlap,) = [f for f in doc["findings"] if f["id"] == "stage-timers-overlap"]
    assert overlap["title"] == "stage timers add up to more than the step in 1 of 1 step"  # not "1 of 1 steps"
    for other in (
        "12_charcount_grpo_smollm135m_1gpu",
        "15_tinyzero_countdown_ppo_4090",
        "19_verl_quickstart_doc_oldformat",
    ):
        _, doc = _run_json(capsys, str(REAL_LOGS / f"{other}.log"))
        assert "reward-no-signal" not in {f["id"] for f in doc["findings"]}  # rewards vary, or a critic learns


def test_a_jsonl_metrics_file_is_imported_and_diagnosed(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": s, "data": {"timing_s/gen": 30.0, "timing_s/update_actor": 10.0, "timing_s/step": 42.0}}
        for s in (1, 2)
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, doc = _run_json(capsys, str(path))
    assert code == 0 and doc["run"]["steps"] == 2
    assert doc["headline"]["generation_share"] == pytest.approx(30 / 42)


def test_a_step_timer_logged_as_infinity_is_no_step_timed_by_its_stages(tmp_path, capsys):
    # steps 1-3: gen 60 + update 40 = the 100 s step timer; step 4's step timer and gen are Infinity
    # (json.dumps writes it so; verl's orjson writes null). Its step is not 40 s (update alone): its
    # time is unknown, so it is left out, and the recent quarter of steps 1-3 is step 3: 100 s, 60%
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": s, "data": {"timing_s/gen": 60.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0}}
        for s in (1, 2, 3)
    ]
    lines.append(
        {"step": 4, "data": {"timing_s/gen": math.inf, "timing_s/update_actor": 40.0, "timing_s/step": math.inf}}
    )
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, doc = _run_json(capsys, str(path))
    assert code == 0 and (doc["run"]["steps"], doc["run"]["last_step"]) == (3, 3)
    assert doc["headline"]["step_s"] == pytest.approx(100) and doc["headline"]["step_s_basis"] == "step timer"
    assert doc["headline"]["generation_share"] == pytest.approx(0.6)
    said = [w for w in doc["run"]["warnings"] if "inf or NaN" in w]
    assert said == [
        "timing_s/gen was logged as inf or NaN in step 4: read as untimed there",
        "timing_s/step was logged as inf or NaN in step 4: time unknown, left out of the step analysis "
        "rather than timed by the sum of the stage timers",
    ]


def test_a_non_finite_timer_of_an_attempt_logged_again_is_no_gap():
    # step 2 crashed with an inf step timer (attempt 0) and was trained again in 50 s (attempt 1):
    # the latest attempt's timer stands; step 3's NaN gen stays a gap
    rows = [(1, 0, "timing_s/step", 40.0), (2, 0, "timing_s/step", math.inf), (2, 1, "timing_s/step", 50.0)]
    rows += [(3, 0, "timing/gen", math.nan), (3, 0, "timing_s/step", 40.0)]  # an old name, canonicalised
    steps = pd.DataFrame(rows, columns=["step", "attempt", "key", "value"])
    assert unfinite_timers(steps) == {"timing_s/gen": (3,)}


def test_a_non_finite_timer_is_found_in_any_chunk_of_an_arrow_table_as_null_or_inf():
    # the table as the reader gives it, in two segments: step 2's gen null (verl's file logger writes inf
    # and NaN so), step 3's update inf in the second chunk; a NaN of a metric that is no timer is none
    first = [(1, 0, "timing_s/gen", 10.0), (2, 0, "timing_s/gen", None), (2, 0, "actor/loss", math.nan)]
    second = [(3, 0, "timing_s/update_actor", math.inf), (3, 0, "timing_s/gen", 10.0)]
    names = ["step", "attempt", "key", "value"]
    chunks = [
        pd.DataFrame(rows, columns=names).pipe(pa.Table.from_pandas, preserve_index=False) for rows in (first, second)
    ]
    table = pa.concat_tables(chunks)
    assert table.column("value").num_chunks == 2
    assert unfinite_timers(table) == {"timing_s/gen": (2,), "timing_s/update_actor": (3,)}
    assert unfinite_timers(chunks[0].slice(0, 2)) == {"timing_s/gen": (2,)}  # a null alone
    assert unfinite_timers(pa.concat_tables([chunks[0].slice(0, 1), chunks[1]])) == {"timing_s/update_actor": (3,)}
    assert unfinite_timers(table.slice(0, 1)) == {}  # every value finite
    assert unfinite_timers(pa.concat_tables([chunks[0].slice(2), chunks[1].slice(1)])) == {}  # NaN of no timer


def test_a_share_logged_out_of_range_is_warned_about_once_and_read_as_not_logged(tmp_path, capsys):
    # async 8:8 on 16 GPUs, 100 s steps, forward + training 50 s on the 8 training GPUs. verl's rollouter
    # idle ratio, a share of the version's time, is 0.5 but 1.1 at steps 3 and 8 and 0.2 at step 9; the
    # trainer's is NaN at step 5 and the occupancy share (in the older spelling's key) -0.2 at step 6.
    # The model is of steps 2-9 (step 1 fills the pipeline), recent steps 8 and 9: step 8 takes step 7's
    # idle ratio, busy 0.5 x 100 = 50 s, step 9 80 s: T_thr (50 + 80) / 2 x 8/16 = 32.5 s on all 16 GPUs,
    # T_t 25 s: async 9:7 at max(32.5 x 16/9, 25 x 16/7) = 520/9 s (1.1 read would give T_thr 17.5 s, 7:9)
    meta = {"gpu": {"type": "H100", "count": 16}, "topology": "fully_async", "split": "8:8"}
    step = {"timing_s/gen": 5.0, "timing_s/old_log_prob": 10.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0}
    idle = {s: 0.5 for s in range(1, 10)} | {3: 1.1, 8: 1.1, 9: 0.2}
    with Recorder(tmp_path / "run", meta=meta) as rec:
        for s in range(1, 10):
            metrics = {**step, "rollouter/idle_ratio": idle[s], "fully_async/trainer/idle_ratio": 0.05}
            if s == 5:
                metrics["fully_async/trainer/idle_ratio"] = math.nan
            if s == 6:
                metrics["dynamic_resource/rollout_resource_utilization"] = -0.2
            rec.log_step(s, metrics)
    code, doc = _run_json(capsys, str(tmp_path / "run"))
    assert code == 0
    assert [w for w in doc["run"]["warnings"] if "share" in w] == [
        "dynamic_resource/rollout_resource_utilization, a share, was logged outside [0, 1] in 1 step "
        "(step 6: -0.2): read as not logged there",
        "fully_async/rollouter/idle_ratio, a share, was logged outside [0, 1] in 2 steps (first step 3: 1.1): "
        "read as not logged there",
        "fully_async/trainer/idle_ratio, a share, was logged outside [0, 1] in 1 step (step 5: nan): "
        "read as not logged there",
    ]
    best = {row["topology"]: row for row in doc["topology"]["what_if"]}["async_streaming"]
    assert (best["n_rollout"], best["n_train"], best["step_s"]) == (9, 7, pytest.approx(520 / 9))
    drift = {row["step"]: row["t_thr_s"] for row in doc["split_drift"]["per_step"]}
    assert drift == pytest.approx({**dict.fromkeys(range(2, 9), 25.0), 9: 40.0})
    # the text report lists the same lines under its warnings, once each
    assert main(["diagnose", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert out.count("fully_async/rollouter/idle_ratio, a share, was logged outside [0, 1]") == 1


def test_a_share_out_of_range_in_an_attempt_logged_again_is_not_warned_about():
    # step 2's rollouter idle ratio of 1.5 (attempt 0) was logged again as 0.4 (attempt 1): the latest
    # attempt stands; step 3 logged 1.2 and then NaN in one record, an old name, canonicalised
    rows = [(1, 0, "fully_async/rollouter/idle_ratio", 0.3), (2, 0, "fully_async/rollouter/idle_ratio", 1.5)]
    rows += [(2, 1, "fully_async/rollouter/idle_ratio", 0.4), (3, 0, "rollouter/idle_ratio", 1.2)]
    rows += [(3, 0, "rollouter/idle_ratio", math.nan), (3, 0, "timing_s/step", 40.0)]
    steps = pd.DataFrame(rows, columns=["step", "attempt", "key", "value"])
    assert out_of_range_shares(steps) == {"fully_async/rollouter/idle_ratio": ((3, 1.2),)}


def test_hardware_and_model_given_on_the_command_line(capsys):
    run = str(SAMPLES / "longtail-8b")  # 64 H100s, an 8B model, in its meta.json
    _, h100 = _run_json(capsys, run)
    # MFU is useful FLOPs over peak FLOP/s: an A100's 312 TFLOP/s for the H100's 989 scales it by 989/312
    _, a100 = _run_json(capsys, run, "--gpu-type", "A100")
    assert a100["headline"]["mfu"] == pytest.approx(h100["headline"]["mfu"] * 989 / 312)
    _, peak = _run_json(capsys, run, "--gpu-type", "A100", "--peak-tflops", "500")
    assert peak["headline"]["mfu"] == pytest.approx(h100["headline"]["mfu"] * 989 / 500)
    # FLOPs per token are 2N (generation, forward) and 6N (training): twice the parameters, twice the MFU
    _, big = _run_json(capsys, run, "--active-params", "16e9")
    assert big["headline"]["mfu"] == pytest.approx(h100["headline"]["mfu"] * 2)
    # half the GPUs for the same step times: twice the MFU
    _, half = _run_json(capsys, run, "--gpus", "32")
    assert half["headline"]["mfu"] == pytest.approx(h100["headline"]["mfu"] * 2)


def test_the_json_report_writes_a_number_from_meta_json_that_is_beyond_64_bits(tmp_path, capsys):
    # the report is written with orjson, which refuses integers beyond 64 bits: meta.json's
    # framework_version, echoed as it is, can be one
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "healthy-colocated", run)
    meta = json.loads((run / "meta.json").read_text())
    meta["framework_version"] = 2**70
    (run / "meta.json").write_text(json.dumps(meta))
    code, doc = _run_json(capsys, str(run))
    assert code == 0 and doc["run"]["framework_version"] == 2**70
    assert doc["run"]["framework"] == meta["framework"]


def test_the_json_report_is_ascii_whatever_the_terminal_s_encoding(tmp_path):
    import subprocess

    # text beyond ASCII from the data (here the run's path) is escaped, as JSON allows, so that a
    # stdout in latin-1 (a Windows pipe's cp1252, say) takes the report
    run = tmp_path / "rün-数"
    shutil.copytree(SAMPLES / "healthy-colocated", run)
    done = subprocess.run(
        [sys.executable, "-m", "rlscope", "diagnose", str(run), "--format", "json"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "latin-1"},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout.isascii() and json.loads(done.stdout)["run"]["source"] == str(run)


def test_a_meta_json_value_the_analyzers_cannot_use_is_ignored_with_a_warning(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "longtail-8b", run)
    meta = json.loads((run / "meta.json").read_text())
    meta["model"] = {"name": meta["model"]["name"], "active_params": "eight billion"}
    meta["max_off_policy_threshold"] = -1
    (run / "meta.json").write_text(json.dumps(meta))
    code = main(["diagnose", str(run), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["run"]["active_params"] is None and json.loads(out)["headline"]["mfu"] is None
    assert "meta.json: model.active_params is 'eight billion', not a positive number; ignored" in err
    assert "max_off_policy_threshold is -1" in err


@pytest.mark.parametrize(
    ("change", "warning"),
    [
        ({"gpu": "H100"}, "gpu is 'H100', not an object"),
        ({"topology": 5}, "topology is 5, not a name"),
        ({"split": [True, True]}, "split is [True, True], not rollout:train GPUs"),
        ({"model": {"active_params": 10**400}}, "model.active_params is 1000000000000000000000000000000000000..."),
        ({"max_off_policy_threshold": 10**400}, "max_off_policy_threshold is 1000000000"),
    ],
)
def test_odd_meta_json_shapes_and_sizes_are_warned_about_everywhere(tmp_path, capsys, change, warning):
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "healthy-colocated", run)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(change)
    (run / "meta.json").write_text(json.dumps(meta))
    for command in (
        ["diagnose", str(run)],
        ["compare", str(run), str(SAMPLES / "healthy-colocated")],
        ["info", str(run)],
    ):
        assert main(command) == 0, command
        out, err = capsys.readouterr()
        assert warning in err + out, command  # diagnose and compare warn; info lists what it ignores


def test_meta_given_on_the_command_line_merges_before_it_is_judged(tmp_path, capsys):
    # half a split, completed by the run's own: accepted
    args = ["--meta", '{"split": {"rollout": 40}}', "--gpus", "58"]
    code, doc = _run_json(capsys, str(SAMPLES / "separated-8b"), *args)
    assert code == 0 and doc["run"]["split"] == {"rollout": 40, "train": 18}
    # a bad gpu.count that --gpus replaces is not warned about
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "healthy-colocated", run)
    meta = json.loads((run / "meta.json").read_text())
    meta["gpu"]["count"] = -8
    (run / "meta.json").write_text(json.dumps(meta))
    assert main(["diagnose", str(run), "--gpus", "8", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["run"]["gpu_count"] == 8 and "gpu.count" not in err


def test_a_log_that_opens_with_verls_config_dump_is_read_as_a_console_log(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(
        "{'actor_rollout_ref': {'rollout': {'n': 4}},\n 'data': {'train_batch_size': 64},\n"
        " 'trainer': {'n_gpus_per_node': 8, 'nnodes': 2}}\n"
        "step:1 - timing_s/gen:40.0 - timing_s/step:100.0\n"
    )
    code, doc = _run_json(capsys, str(log))
    assert code == 0 and doc["run"]["gpu_count"] == 16 and doc["run"]["steps"] == 1
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--format", fmt]) == 0
        assert "16 GPUs (type not stated)" in capsys.readouterr().out  # not "16 x None", nor a bare 16


def test_a_gpu_count_without_its_type_says_it_counts_gpus(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text("step:1 - timing_s/gen:40.0 - timing_s/step:100.0\n")
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--format", fmt, "--gpus", "1"]) == 0
        assert "1 GPU (type not stated)" in capsys.readouterr().out  # not a bare "1"


def _verl_mfu_log(tmp_path: Path) -> Path:
    """Eight steps of verl's own actor-update MFU, the last 0 (verl's unset value)."""
    log = tmp_path / "train.log"
    mfu = [0.10, 0.12, 0.14, 0.16, 0.18, 0.20, 0.30, 0.0]
    log.write_text(
        "".join(
            f"step:{s} - timing_s/gen:40.0 - timing_s/update_actor:30.0 - timing_s/step:100.0 - perf/mfu/actor:{m} - "
            "prompt_length/mean:100.0 - response_length/mean:400.0\n"
            for s, m in enumerate(mfu, start=1)
        )
    )
    return log


def test_verls_stage_mfu_is_shown_where_the_whole_step_mfu_is_not_known(tmp_path, capsys):
    log = _verl_mfu_log(tmp_path)
    _, doc = _run_json(capsys, str(log))
    assert doc["headline"]["mfu"] is None
    # the recent mean over the last quarter of 8 steps (7 and 8) of verl's own value, its 0 unset: step 7's 0.30
    assert doc["mfu"]["verl_stage_mfu"] == [{"key": "perf/mfu/actor", "stage": "update_actor", "mfu": 0.30}]
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--format", fmt]) == 0
        out = capsys.readouterr().out
        # as a reader sees it: the text report wraps its lines, Markdown escapes _ and HTML the quote
        out = " ".join(unescape(out.replace("\\_", "_")).split())
        assert "verl's stage MFU" in out and "update_actor 30.0% (perf/mfu/actor)" in out
        assert "not a whole-step MFU" in out
    # with the whole-step MFU known, verl's is still in the JSON (as the cross-check), not in the headline
    facts = [
        "--gpus",
        "8",
        "--gpu-type",
        "H100",
        "--active-params",
        "7e9",
        "--meta",
        '{"batch_size": 8, "group_size": 4}',
    ]
    _, doc = _run_json(capsys, str(log), *facts)
    assert doc["headline"]["mfu"] is not None
    assert doc["mfu"]["verl_stage_mfu"] == [{"key": "perf/mfu/actor", "stage": "update_actor", "mfu": 0.30}]
    assert main(["diagnose", str(log), *facts]) == 0
    assert "verl's stage MFU" not in capsys.readouterr().out


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found (set RLSCOPE_REAL_LOGS)")
def test_a_real_logs_verl_actor_mfu_is_shown_without_the_hardware(capsys):
    # rllm issue 54's step 4 logs perf/mfu/actor:0.387 and states no GPUs or model
    log = str(REAL_LOGS / "07_rllm54_zero_reward_step4.log")
    _, doc = _run_json(capsys, log)
    assert doc["headline"]["mfu"] is None
    assert doc["mfu"]["verl_stage_mfu"] == [{"key": "perf/mfu/actor", "stage": "update_actor", "mfu": 0.387}]
    assert main(["diagnose", log]) == 0
    assert "update_actor 38.7% (perf/mfu/actor)" in capsys.readouterr().out


def test_mfu_of_a_console_log_from_the_batch_gpus_and_model_it_states(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(
        "+ python3 -m verl.trainer.main_ppo data.train_batch_size=64 actor_rollout_ref.rollout.n=4 "
        "trainer.n_gpus_per_node=8 trainer.nnodes=2\n"
        "(WorkerDict pid=9) Qwen2ForCausalLM contains 7.62B parameters\n"
        "(TaskRunner pid=7) step:1 - timing_s/gen:40.0 - timing_s/old_log_prob:10.0 - timing_s/ref:10.0 - "
        "timing_s/update_actor:40.0 - timing_s/step:100.0 - prompt_length/mean:100.0 - response_length/mean:400.0\n"
    )
    _, doc = _run_json(capsys, str(log), "--peak-tflops", "1000")
    # 64 x 4 sequences of 100 + 400 tokens; 12N FLOPs a token (generation, old logprob, ref 2N each,
    # the update 6N) over 100 s on 2 x 8 GPUs of 1000 TFLOP/s
    flops = 64 * 4 * (100 + 400) * 12 * 7.62e9
    assert doc["headline"]["mfu"] == pytest.approx(flops / (100 * 16 * 1000e12))
    assert doc["run"]["gpu_count"] == 16
    # the same log without its launch and size lines: the batch from --meta, the rest from flags
    bare = tmp_path / "bare.log"
    bare.write_text(log.read_text().splitlines(keepends=True)[-1])
    args = ["--peak-tflops", "1000", "--gpus", "16", "--active-params", "7.62e9"]
    _, doc = _run_json(capsys, str(bare), *args)
    assert doc["headline"]["mfu"] is None  # no batch shape: no tokens per step
    _, doc = _run_json(capsys, str(bare), *args, "--meta", '{"batch_size": 64, "group_size": 4}')
    assert doc["headline"]["mfu"] == pytest.approx(flops / (100 * 16 * 1000e12))


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found (set RLSCOPE_REAL_LOGS)")
def test_a_one_gpu_log_with_its_hardware_has_only_colocation_to_offer(capsys):
    log = str(REAL_LOGS / "15_tinyzero_countdown_ppo_4090.log")
    code, doc = _run_json(capsys, log, "--gpus", "1", "--gpu-type", "RTX 4090", "--active-params", "3e9")
    assert code == 0 and doc["headline"]["best_topology"]["topology"] == "colocated"
    assert [r["topology"] for r in doc["topology"]["what_if"]] == ["colocated"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "0"], "--gpus: must be a finite number above 0"),
        (["--gpus", "1e400"], "--gpus: must be a finite number above 0"),
        (["--gpus", "2.5e0"], "--gpus: expected a whole number of GPUs, got '2.5e0'"),
        (["--active-params", "lots"], "--active-params: not a number"),
        (["--active-params", "inf"], "--active-params: must be a finite number above 0"),
        (["--active-params", "-7e9"], "--active-params: must be a finite number above 0"),  # a value, not an option
        (["--peak-tflops", "-1E3"], "--peak-tflops: must be a finite number above 0"),
        (["--gpu-type", "V100"], "unknown --gpu-type 'V100'; give --peak-tflops too"),
        (["--meta", "[1]"], "--meta: expected a JSON object"),
        (["--meta", "{batch"], "--meta: not JSON"),
        (["--meta", '{"batch_size": "abc"}'], "--meta: batch_size is 'abc', not a positive whole number"),
        (["--meta", '{"group_size": NaN}'], "--meta: group_size is nan, not a positive whole number"),
        (["--meta", '{"split": "a:b"}'], "--meta: split is 'a:b', not rollout:train GPUs"),
        (["--meta", '{"topology": "banana"}'], "--meta: topology is 'banana', not colocated, separated"),
        # longtail-8b runs on 64 GPUs
        (
            ["--meta", '{"topology": "separated", "split": "4:4"}'],
            "--meta: split 4:4 adds up to 8 GPUs, not the run's 64",
        ),
    ],
)
def test_bad_hardware_is_a_one_line_usage_error(args, message, capsys):
    assert main(["diagnose", str(SAMPLES / "longtail-8b"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_output_that_cannot_be_written_is_refused_before_the_analysis(tmp_path, capsys, monkeypatch):
    import rlscope.analyzers

    def never(*_args, **_kwargs):
        raise AssertionError("analysed although the report could not be written")

    monkeypatch.setattr(rlscope.analyzers, "analyze_run", never)
    run = str(SAMPLES / "healthy-colocated")
    missing = tmp_path / "no"
    # an output that cannot be written is an error (1), whatever the reason: 2 is for options argparse refuses
    for output, reason in ((missing / "r.txt", f"no such directory {missing}"), (tmp_path, "it is a directory")):
        assert main(["diagnose", run, "--output", str(output)]) == 1
        assert capsys.readouterr().err == f"rlscope: cannot write {output}: {reason}\n"


def test_an_output_on_a_read_only_file_system_is_called_that_not_permission_denied(tmp_path, capsys, monkeypatch):
    # root on a read-only mount, or anyone on a read-only volume: chmod does not explain it, so the message must not
    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "access", lambda *_a, **_k: False)
    monkeypatch.setattr(os, "statvfs", lambda _path: ReadOnly())
    run, report = str(SAMPLES / "healthy-colocated"), tmp_path / "r.txt"
    assert main(["diagnose", run, "--output", str(report)]) == 1
    assert capsys.readouterr().err == f"rlscope: cannot write {report}: read-only file system\n"
    log = tmp_path / "train.log"
    log.write_text("step:1 - timing_s/gen:10.0 - timing_s/step:15.0\n")
    assert main(["import", "verl-log", str(log), "--out", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err.endswith(f"{tmp_path} is not writable (read-only file system)\n")


def test_a_whole_number_in_exponent_form_is_a_gpu_count(capsys):
    _, doc = _run_json(capsys, str(SAMPLES / "healthy-colocated"), "--gpus", "8e0")
    assert doc["run"]["gpu_count"] == 8


def test_an_infinite_stage_timer_is_missing_not_a_broken_report(tmp_path, capsys):
    # verl logs inf for a timer that overflowed: step 8's update is unknown, not infinite
    log = tmp_path / "inf.log"
    log.write_text(
        "".join(
            f"step:{i} - timing_s/gen:{3 * i}.0 - timing_s/update_actor:{'inf' if i == 8 else '10.0'} - "
            "timing_s/step:45.0\n"
            for i in range(1, 9)
        )
    )
    code, doc = _run_json(capsys, str(log), "--gpus", "8")
    assert code == 0 and doc["headline"]["step_s"] == 45.0
    assert all(row["step_s"] is not None for row in doc["topology"]["what_if"])
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--gpus", "8", "--format", fmt, "-o", str(tmp_path / fmt)]) == 0
        assert "inf s" not in (tmp_path / fmt).read_text()


def test_an_mfu_above_peak_is_called_a_wrong_fact_and_not_drawn(capsys):
    # 150B active parameters on the 1.5B healthy run: about 100x the real MFU, far above 100%
    code, doc = _run_json(capsys, str(SAMPLES / "healthy-colocated"), "--active-params", "1.5e11")
    assert code == 0 and doc["headline"]["mfu"] > 1
    (f,) = [f for f in doc["findings"] if f["id"].startswith("mfu")]
    assert f["id"] == "mfu-impossible" and f["severity"] == "critical"
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--active-params", "1.5e11"]) == 0
    assert "MFU waterfall" not in capsys.readouterr().out


def test_a_missing_mfu_says_what_would_give_it(capsys):
    log = str(REAL_LOGS / "15_tinyzero_countdown_ppo_4090.log")
    if not REAL_LOGS.is_dir():
        pytest.skip("real logs not found (set RLSCOPE_REAL_LOGS)")
    _, doc = _run_json(capsys, log)
    assert doc["mfu"]["missing"] == [
        "--gpus",
        "--gpu-type or --peak-tflops",
        "--active-params",
        """--meta '{"batch_size": B, "group_size": G}'""",
    ]
    assert main(["diagnose", log, "--gpus", "1", "--gpu-type", "RTX 4090", "--active-params", "3e9"]) == 0
    assert """whole-step MFU    n/a (needs --meta '{"batch_size": B, "group_size": G}')""" in capsys.readouterr().out


def test_mfu_of_a_ppo_log_without_the_critic_size_says_it_leaves_the_critic_out(capsys):
    # TinyZero PPO: a critic (timing_s/values, update_critic) whose size the log does not state
    log = str(REAL_LOGS / "15_tinyzero_countdown_ppo_4090.log")
    if not REAL_LOGS.is_dir():
        pytest.skip("real logs not found (set RLSCOPE_REAL_LOGS)")
    facts = ["--gpus", "1", "--peak-tflops", "165", "--active-params", "0.5e9"]
    batch = {"batch_size": 32, "group_size": 1}
    _, doc = _run_json(capsys, log, *facts, "--meta", json.dumps(batch))
    assert doc["mfu"]["uncounted"] == ["values", "update_critic"]
    assert main(["diagnose", log, *facts, "--meta", json.dumps(batch)]) == 0
    hint = """a lower bound: values, update_critic not counted; --meta '{"model": {"critic_params": N}}'"""
    assert hint in capsys.readouterr().out.replace("\n                    ", " ")
    assert main(["compare", log, log, *facts, "--meta", json.dumps(batch)]) == 0
    assert "B's whole-step MFU (a lower bound: values, update_critic not counted" in capsys.readouterr().out
    # the critic as large as the actor: step 122, 32 x (143.750 + 61.094) tokens, 8.635 s; FLOPs per
    # token gen 2N + ref 2N + values 2N + update_critic 6N + update_actor 6N = 18N
    _, doc = _run_json(capsys, log, *facts, "--meta", json.dumps(batch | {"model": {"critic_params": 0.5e9}}))
    assert doc["mfu"]["uncounted"] == []
    assert doc["headline"]["mfu"] == pytest.approx(18 * 0.5e9 * 32 * (143.750 + 61.094) / (8.635 * 165e12))


def test_every_format_shows_the_same_headline(tmp_path, capsys):
    # an overlapped run: generation is seconds beside the step, not a share above 100%
    run = str(SAMPLES / "async-drift")
    assert main(["diagnose", run, "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "beside the step" in page and "<th>split</th><td>21:11</td>" in page
    assert main(["diagnose", run, "--format", "markdown"]) == 0
    assert "beside the step" in capsys.readouterr().out


def test_a_csv_given_to_diagnose_points_to_its_importer(tmp_path, capsys):
    export = tmp_path / "wandb.csv"
    export.write_text("_step,actor/pg_loss\n1,0.5\n")
    assert main(["diagnose", str(export)]) == 1
    assert "rlscope import wandb-csv FILE --out RUN_DIR" in capsys.readouterr().err


def test_a_tensorboard_log_directory_given_to_diagnose_points_to_its_importer(tmp_path, capsys):
    # what a verl run with logger=tensorboard leaves: a folder of event files, no meta.json
    logdir = tmp_path / "tensorboard_log" / "exp1"
    logdir.mkdir(parents=True)
    (logdir / "events.out.tfevents.1754112000.host.4242.0").write_bytes(b"")
    for given in (logdir, logdir.parent):  # the run's folder, or the one verl names for all runs
        assert main(["diagnose", str(given)]) == 1
        assert capsys.readouterr().err == (
            f"rlscope: {given}: TensorBoard event files, not a run directory: "
            f"rlscope import tensorboard {given} --out RUN_DIR, then diagnose RUN_DIR\n"
        )


def test_a_log_on_standard_input_is_diagnosed_as_the_file_is(tmp_path, capsys, monkeypatch):
    # zcat train.log.gz | rlscope diagnose -
    body = "".join(f"step:{s} - timing_s/gen:10.0 - timing_s/update_actor:4.0 - timing_s/step:15.0\n" for s in (1, 2))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body.encode())))
    code, doc = _run_json(capsys, "-")
    assert code == 0 and (doc["run"]["first_step"], doc["run"]["last_step"]) == (1, 2)
    assert doc["headline"]["generation_share"] == pytest.approx(10.0 / 15.0)
    # standard input is read once: it cannot be both runs of a comparison
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body.encode())))
    assert main(["compare", "-", "-"]) == 2
    assert "standard input (-) can be only one of RUN_A and RUN_B" in capsys.readouterr().err


def test_a_run_with_no_rows_is_an_error_not_a_clean_report(tmp_path, capsys):
    from rlscope import Recorder

    run = tmp_path / "run"
    with Recorder(run, meta={"gpu": {"count": 8}}):
        pass
    for command in (["diagnose", str(run), "--fail-on", "warn"], ["compare", str(run), str(run)]):
        assert main(command) == 1
        err = capsys.readouterr().err
        assert (
            err
            == f"rlscope: {run}: no rows yet (no step metrics, trajectories, spans or GPU samples): nothing to diagnose\n"
        )


@pytest.mark.parametrize(
    ("name", "head", "encoding"),
    [
        ("bom.jsonl", "", "utf-8-sig"),  # a Windows tool's byte-order mark
        ("junk-first.ndjson", "garbage line\n", "utf-8"),  # read as JSONL by its name
        ("junk-first.txt", "garbage line\n", "utf-8"),  # JSONL whose first line is not JSON
        ("json-first.log", '{"level": "info", "msg": "job submitted"}\n', "utf-8"),  # a console log
    ],
)
def test_a_file_is_read_as_whichever_format_finds_its_steps(tmp_path, capsys, name, head, encoding):
    if name.endswith(".log"):
        body = "".join(f"step:{s} - timing_s/gen:10.0 - timing_s/step:15.0\n" for s in (1, 2, 3))
    else:
        body = "".join(
            json.dumps({"step": s, "data": {"timing_s/gen": 10.0, "timing_s/step": 15.0}}) + "\n" for s in (1, 2, 3)
        )
    path = tmp_path / name
    path.write_text(head + body, encoding=encoding)
    code, doc = _run_json(capsys, str(path))
    assert code == 0 and (doc["run"]["first_step"], doc["run"]["last_step"]) == (1, 3)
    assert doc["headline"]["generation_share"] == pytest.approx(10.0 / 15.0)
    # json's own message for "garbage line", at the line it is on
    first = f"{path}:1: Expecting value: line 1 column 1 (char 0)"
    skipped = [f"the import (verl-jsonl) left out 1 bad_json (first at {first})"] if name.startswith("junk") else []
    assert doc["run"]["warnings"] == skipped  # what the import dropped is in the report, not only on stderr


def test_a_validation_dict_that_repeats_its_step_line_is_no_warning(tmp_path, capsys):
    # verl prints the validation before training twice: a pprinted dict and its step:0 line; nothing is lost
    log = tmp_path / "train.log"
    log.write_text(
        "Initial validation metrics: {'val-core/gsm8k/reward/mean@1': 0.25}\n"
        "step:0 - val-core/gsm8k/reward/mean@1:0.25\n"
        "step:1 - timing_s/gen:10.0 - timing_s/step:15.0 - actor/kl:0.1 - actor/kl:0.2\n"
    )
    _, doc = _run_json(capsys, str(log))
    # the repeated key loses a value, and says so; the dict lost nothing
    assert doc["run"]["warnings"] == [f"the import (verl-log) left out 1 duplicate_key (first at {log}:3: actor/kl)"]
    assert main(["diagnose", str(log)]) == 0
    out = capsys.readouterr().out
    assert "duplicate_key" in out and "duplicate_of_step_line" not in out


def test_a_run_whose_steps_have_no_timer_says_so_not_that_it_has_no_steps(tmp_path, capsys):
    # three logged steps, none timed: a timed step is what the analyzers count, and the header names it
    log = tmp_path / "train.log"
    log.write_text("".join(f"step:{s} - actor/pg_loss:0.1 - critic/score/mean:0.5\n" for s in (1, 2, 3)))
    pages = {}
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--format", fmt]) == 0
        pages[fmt] = capsys.readouterr().out
    assert "| no timed steps\n" in pages["text"]
    assert "- **steps**: none timed" in pages["markdown"]
    assert "<th>steps</th><td>none timed</td>" in pages["html"]


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.strip().endswith("no such run directory or log file")
    empty = tmp_path / "empty.log"
    empty.write_text("no metrics here\n")
    assert main(["diagnose", str(empty)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no verl metric lines" in err
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--format", "pdf"]) == 2
    assert "Traceback" not in capsys.readouterr().err


# what each injected fault must produce, from the simulator's ground truth in meta.json
FAULT_FINDINGS = {"reward_error": "reward-source-failing", "engine_imbalance": "engine-imbalanced"}


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir() if (p / "meta.json").is_file()))
def test_injected_faults_are_found_and_healthy_runs_stay_quiet(name):
    truth = json.loads((SAMPLES / name / "meta.json").read_text())
    found = analyze_run(str(SAMPLES / name)).findings
    by_id = {}
    for f in found:
        by_id.setdefault(f.id, []).append(f)
    for fault in truth["ground_truth"]["faults"]:
        kind = fault["kind"]
        if kind == "reward_error":
            (f,) = [f for f in by_id["reward-source-failing"] if f.evidence["source"] == fault["source"]]
            assert (f.evidence["first_step"], f.evidence["last_step"]) == tuple(fault["steps"])
            assert set(f.evidence["codes"]) == set(fault["error_codes"])
        elif kind == "engine_imbalance":
            (f,) = by_id["engine-imbalanced"]
            assert f.evidence["heaviest"] == fault["engine"]
            assert f.evidence["heaviest_share"] == pytest.approx(fault["share"], abs=0.03)
        elif kind == "logprob_mismatch":
            expected = "moe-routing-flips" if truth["model_type"] == "moe" else "logprob-mismatch-high"
            assert expected in by_id
        else:
            pytest.fail(f"no expectation for fault kind {kind!r}")
    if name == "healthy-colocated":
        assert all(f.severity.value == "info" for f in found)
    if not truth["ground_truth"]["faults"]:
        assert "reward-source-failing" not in by_id and "engine-imbalanced" not in by_id


def test_an_error_logged_with_its_exception_shows_the_traceback(capsys):
    import logging

    from rlscope.cli import _setup_logging

    _setup_logging()
    try:
        raise ValueError("rows of unequal length")
    except ValueError:
        logging.getLogger("rlscope.dashboard").exception("dashboard: a page failed to render")
    err = capsys.readouterr().err
    assert err.startswith("rlscope: error: dashboard: a page failed to render\nTraceback (most recent call last):")
    assert "ValueError: rows of unequal length" in err


def _write_through_a_pipe(tmp_path, data: bytes) -> tuple[str, threading.Thread]:
    """A named pipe that a thread fills with ``data`` (as ``<(zcat x.log.gz)`` gives a path)."""
    fifo = tmp_path / "piped.log"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return str(fifo), writer


def test_a_log_given_as_a_pipe_is_read_whole(tmp_path, capsys):
    step_lines = "".join(f"step:{s} - timing_s/gen:{s}.5 - timing_s/step:{2 * s}.5\n" for s in range(1, 5))
    # the first steps within the first 8 kB, a look at which must not swallow them
    data = step_lines.encode() + b"warming up\n" * 2000 + b"step:5 - timing_s/gen:5.5 - timing_s/step:10.5\n"
    fifo, writer = _write_through_a_pipe(tmp_path, data)
    code, doc = _run_json(capsys, fifo)
    writer.join(5)
    assert code == 0 and doc["run"]["first_step"] == 1 and doc["run"]["last_step"] == 5


def test_an_unreadable_log_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    log = tmp_path / "noperm.log"
    log.write_text("step:1 - timing_s/gen:1.0\n")
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):  # as a file with mode 000 is to anyone but root
        if os.fspath(file) == str(log):
            raise PermissionError(13, "Permission denied", str(log))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    assert main(["diagnose", str(log)]) == 1
    assert capsys.readouterr().err == f"rlscope: {log}: cannot read (Permission denied)\n"


def test_the_step_time_says_when_it_is_the_sum_of_stage_timers(tmp_path, capsys):
    log = tmp_path / "no-step-timer.log"
    log.write_text("".join(f"step:{i} - timing_s/gen:30.0 - timing_s/update_actor:10.0\n" for i in range(1, 5)))
    code, doc = _run_json(capsys, str(log))
    assert code == 0 and doc["headline"]["step_s"] == 40.0  # 30 + 10: a lower bound of the wall clock
    assert doc["headline"]["step_s_basis"] == "sum of stage timers"
    assert main(["diagnose", str(log)]) == 0
    assert "40 s (recent mean; the sum of its stage timers, no timing_s/step)" in capsys.readouterr().out
    log.write_text("".join(f"step:{i} - timing_s/gen:30.0 - timing_s/step:45.0\n" for i in range(1, 5)))
    assert _run_json(capsys, str(log))[1]["headline"]["step_s_basis"] == "step timer"


def test_the_fully_async_trainers_final_window_is_no_restart_and_no_warning(tmp_path, capsys):
    # fit() ends after version 3 (not due for validation, test_freq 2) with one more sync, logging
    # a second rollouter window of step 3 (after the last update): left out, step 3 keeps its own
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in fully_async_records(3)))
    code, doc = _run_json(capsys, str(jsonl))
    assert code == 0 and (doc["run"]["first_step"], doc["run"]["last_step"]) == (1, 3)
    assert doc["run"]["warnings"] == []
    # the last quarter of 3 steps is step 3: its own window's idle ratio beside update 3's trainer idle
    (idle,) = [f["evidence"] for f in doc["findings"] if f["id"] == "async-idle-imbalanced"]
    last = update_metrics(3, 2)
    assert idle["rollouter_idle"] == pytest.approx(rollouter_window(3)["fully_async/rollouter/idle_ratio"])
    assert idle["trainer_idle"] == pytest.approx(last["timing_s/gen"] / last["timing_s/step"])


def test_a_restarted_log_is_told(tmp_path, capsys):
    log = tmp_path / "resumed.log"
    log.write_text(
        "".join(f"step:{i} - timing_s/gen:30.0 - timing_s/step:45.0\n" for i in (1, 2, 3, 2, 3, 4))
    )  # killed after step 3, resumed from the checkpoint of step 1
    code, doc = _run_json(capsys, str(log))
    assert code == 0
    assert (
        "the log restarted 1 time (steps logged again): each step is read from its latest attempt"
        in doc["run"]["warnings"]
    )


def test_a_restarted_logs_timed_validation_of_its_checkpoint_step_keeps_that_steps_training(tmp_path, capsys):
    log = tmp_path / "resumed.log"
    log.write_text(
        "step:1 - timing_s/gen:30.0 - timing_s/update_actor:10.0 - timing_s/step:45.0\n"
        "step:2 - timing_s/gen:32.0 - timing_s/update_actor:11.0 - timing_s/save_checkpoint:5.0 - timing_s/step:55.0\n"
        "step:3 - timing_s/gen:30.0 - timing_s/update_actor:10.0 - timing_s/step:45.0\n"
        "step:2 - val-core/x:0.3 - timing_s/testing:4.0\n"  # killed after step 3; resumed from step 2, validated
        "step:3 - timing_s/gen:31.0 - timing_s/update_actor:12.0 - timing_s/step:46.0\n"
    )
    code, doc = _run_json(capsys, str(log))
    assert code == 0 and doc["run"]["steps"] == 3  # step 2 is still a training step
    step2 = next(row for row in doc["phases"]["seconds_per_step"] if row["step"] == 2)
    # its first attempt's training and checkpoint, the resume's validation timer; other 55 - 32 - 11 - 5 - 4
    expected = {"step_s": 55.0, "gen": 32.0, "update_actor": 11.0, "checkpoint": 5.0, "validation": 4.0, "other": 3.0}
    assert {k: step2[k] for k in expected} == expected


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found (set RLSCOPE_REAL_LOGS)")
def test_a_waterfall_charging_an_estimated_tail_says_so(tmp_path, capsys):
    args = [str(REAL_LOGS / "07_rllm54_zero_reward_step4.log"), "--gpus", "8", "--gpu-type", "H100"]
    args += ["--active-params", "1.5e9", "--meta", '{"batch_size": 128, "group_size": 8}']
    code, doc = _run_json(capsys, *args)
    assert code == 0 and doc["long_tail"]["estimated"] is True and doc["mfu"]["tail_estimated"] is True
    waterfall = next(f for f in doc["findings"] if f["id"] == "mfu-waterfall")
    assert waterfall["evidence"]["tail_estimated"] is True
    assert "(the long tail is estimated from response lengths)" in waterfall["recommendation"]
    assert " long tail (estimated) " in waterfall["recommendation"] and "long_tail" not in waterfall["recommendation"]
    assert waterfall["evidence"]["top_label"] in waterfall["title"] and "_" not in waterfall["title"]
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", *args, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "long tail (estimated)" in out and "long_tail (estimated)" not in out
    _, measured = _run_json(capsys, str(SAMPLES / "longtail-8b"))
    assert measured["mfu"]["tail_estimated"] is False


def test_a_report_that_cannot_be_written_whole_leaves_the_old_one(tmp_path, capsys, monkeypatch):
    import rlscope.cli.diagnose as diagnose_cli

    report = tmp_path / "report.json"
    report.write_text('{"the": "previous report"}')
    real_replace = os.replace

    def disk_full(src, dst):
        if str(dst) == str(report):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(diagnose_cli.os, "replace", disk_full)
    run = str(SAMPLES / "healthy-colocated")
    assert main(["diagnose", run, "--format", "json", "-o", str(report)]) == 1
    assert capsys.readouterr().err == f"rlscope: cannot write {report}: No space left on device\n"
    assert report.read_text() == '{"the": "previous report"}' and os.listdir(tmp_path) == ["report.json"]
    monkeypatch.setattr(diagnose_cli.os, "replace", real_replace)
    assert main(["diagnose", run, "--format", "json", "-o", str(report)]) == 0
    assert json.loads(report.read_text())["schema"] == "rlscope.diagnose/2"


def test_a_run_with_neither_trajectories_nor_lengths_estimates_no_tail(tmp_path, capsys):
    log = tmp_path / "timers-only.log"
    log.write_text("".join(f"step:{i} - timing_s/gen:30.0 - timing_s/step:45.0\n" for i in range(1, 5)))
    code, doc = _run_json(capsys, str(log))
    assert code == 0 and doc["headline"]["tail_share"] is None and doc["long_tail"]["per_step"] == []
    assert doc["long_tail"]["estimated"] is False and doc["headline"]["tail_estimated"] is False


def test_a_report_written_through_a_link_lands_in_its_target(tmp_path, capsys):
    target = tmp_path / "reports" / "latest.md"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--format", "markdown", "-o", str(link)]) == 0
    assert link.is_symlink() and target.read_text().startswith("# rlscope diagnose")
    assert sorted(os.listdir(target.parent)) == ["latest.md"]  # no temporary file left


def test_gzip_given_to_diagnose_through_a_pipe_names_the_pipe(tmp_path, capsys):
    import gzip

    fifo, writer = _write_through_a_pipe(tmp_path, gzip.compress(b"step:1 - timing_s/gen:1.5\n"))
    assert main(["diagnose", fifo]) == 1
    writer.join(5)
    assert capsys.readouterr().err == f"rlscope: {fifo}: gzip-compressed; decompress it in the pipe: <(zcat FILE.gz)\n"


def test_gzip_given_to_diagnose_as_a_file_or_on_standard_input_says_how_to_diagnose_it(tmp_path, capsys, monkeypatch):
    import gzip

    data = gzip.compress(b"step:1 - timing_s/gen:1.5\n")
    log = tmp_path / "train.log.gz"
    log.write_bytes(data)
    assert main(["diagnose", str(log)]) == 1
    assert (
        capsys.readouterr().err
        == f"rlscope: {log}: gzip-compressed; decompress it in the pipe: zcat {log} | rlscope diagnose -\n"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["diagnose", "-"]) == 1
    assert capsys.readouterr().err == (
        "rlscope: standard input: gzip-compressed; decompress it in the pipe: zcat FILE.gz | rlscope diagnose -\n"
    )


def test_report_axes_are_labelled_in_decades_of_delta_and_whole_gpus():
    # four bins a decade: the axis names 1e-07, 1e-06, ..., 1e+02, not every other bin (2e-07, 6e-07)
    from rlscope.report.figures import mismatch_heatmap, split_drift

    d = analyze_run(str(SAMPLES / "moe-mismatch"))
    fig = mismatch_heatmap(d)
    assert list(fig.layout.yaxis.tickvals) == [f"1e{e:+03d}" for e in range(-7, 3)]
    assert set(fig.layout.yaxis.tickvals) <= set(fig.data[0].y)
    # the balanced split stays 27 of 32 beside the run's 24: ticks one GPU apart, not 24.5
    drift = split_drift(d)
    assert set(drift.data[0].y) == {27} and drift.layout.yaxis.dtick == 1


def test_a_file_of_a_run_directory_points_at_the_directory(tmp_path, capsys):
    run = SAMPLES / "healthy-colocated"
    segment = sorted((run / "steps").glob("*.parquet"))[0]
    for path in (run / "meta.json", segment):
        assert main(["diagnose", str(path)]) == 1
        err = capsys.readouterr().err
        assert err == f"rlscope: {path}: a file of the run directory {run}: give the directory\n"


def test_the_report_is_never_written_over_what_it_reads(tmp_path, capsys):
    log = tmp_path / "train.log"
    text = "step:1 - timing_s/gen:10.0 - timing_s/step:15.0\n"
    log.write_text(text)
    assert main(["diagnose", str(log), "--format", "json", "--output", str(log)]) == 1
    assert capsys.readouterr().err == f"rlscope: cannot write {log}: it is the log being diagnosed\n"
    assert log.read_text() == text  # the log is kept, not replaced by its report
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "healthy-colocated", run)
    meta = (run / "meta.json").read_text()
    for inside in (run / "meta.json", run / "steps" / "report.txt"):
        assert main(["diagnose", str(run), "--output", str(inside)]) == 1
        assert capsys.readouterr().err == f"rlscope: cannot write {inside}: it is part of the run directory {run}\n"
    assert (run / "meta.json").read_text() == meta and not (run / "steps" / "report.txt").exists()
    assert main(["diagnose", str(run), "--output", str(run / "report.txt")]) == 0  # beside its tables is fine


def test_a_saved_report_as_its_own_output_is_named_a_report_not_a_log(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--format", "json", "--output", str(report)]) == 0
    saved = report.read_text()
    assert main(["diagnose", str(report), "--format", "json", "--output", str(report)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"rlscope: cannot write {report}: it is the input, an rlscope report ({SCHEMA}), "
        "not a run: give the run directory or log it was made from\n"
    )
    assert report.read_text() == saved


def test_an_empty_output_path_is_refused_as_other_unwritable_paths_are(capsys):
    # -o "$REPORT" with REPORT unset: the report is not sent to stdout as if no --output were given
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--format", "json", "--output", ""]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "rlscope: cannot write '': an empty path\n"


def test_a_folder_around_or_inside_run_directories_points_at_them(tmp_path, capsys):
    runs = tmp_path / "runs"
    for name in ("b", "a"):
        shutil.copytree(SAMPLES / "healthy-colocated", runs / name)
    assert main(["diagnose", str(runs)]) == 1
    assert capsys.readouterr().err == f"rlscope: {runs}: not a run directory; it holds 2 (a, b): give one\n"
    run = runs / "a"
    assert main(["diagnose", str(run / "steps")]) == 1
    said = f"rlscope: {run / 'steps'}: a folder of the run directory {run}: give the directory\n"
    assert capsys.readouterr().err == said


def test_a_folder_of_logs_points_at_them(tmp_path, capsys):
    # rlscope diagnose logs/ where logs/ holds the console logs themselves: name them, not meta.json
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("train-2.log", "train-1.log", "metrics.jsonl", "notes.txt"):
        (logs / name).write_text("step:1 - timing_s/gen:1.5\n")
    assert main(["diagnose", str(logs)]) == 1
    said = (
        f"rlscope: {logs}: not a run directory; it holds 3 logs (metrics.jsonl, train-1.log, train-2.log): give one\n"
    )
    assert capsys.readouterr().err == said


def test_the_progress_bar_is_drawn_on_stderr_not_into_the_report(capsys, monkeypatch):
    # `rlscope diagnose RUN --format json > report.json` at a terminal: stderr is one, stdout a file
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["schema"] == "rlscope.diagnose/2" and "analysing" in err


def test_an_output_of_a_dash_is_stdout(tmp_path, capsys, monkeypatch):
    # -o - is standard output, as for most tools: no file named "-" left in the working folder
    monkeypatch.chdir(tmp_path)
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--format", "json", "-o", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["steps"] == 30
    assert not (tmp_path / "-").exists()


def test_an_output_link_into_a_missing_folder_is_refused_before_the_analysis(tmp_path, capsys, monkeypatch):
    import rlscope.analyzers

    def never(*_args, **_kwargs):
        raise AssertionError("analysed although the report could not be written")

    monkeypatch.setattr(rlscope.analyzers, "analyze_run", never)
    # a link whose target's folder is gone: the report is written through it, to a folder that is not there
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "gone" / "report.json")
    assert main(["diagnose", str(SAMPLES / "healthy-colocated"), "--output", str(link)]) == 1
    assert capsys.readouterr().err == f"rlscope: cannot write {link}: no such directory {tmp_path / 'gone'}\n"


def test_how_many_recent_steps_timed_each_phase_is_in_the_json(tmp_path, capsys):
    # 8 steps (recent: the last 2), gen and update timed in each, ref in every other one (steps 1, 3, 5,
    # 7: one of the recent two), a wait timer in step 0 only (not recent): ref's 0 s in step 6 is no measurement
    run = str(tmp_path / "run")
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        for step in range(8):
            metrics = {"timing_s/gen": 100.0, "timing_s/update_actor": 30.0, "timing_s/step": 140.0}
            metrics |= {"timing_s/ref": 8.0} if step % 2 else {}
            metrics |= {} if step else {"timing_s/wait_prev_gen": 1.0}
            rec.log_step(step, metrics)
    _, doc = _run_json(capsys, run)
    assert doc["phases"]["logged"] == ["gen", "ref", "update_actor", "waiting"]
    assert doc["phases"]["timed_recent"] == {"gen": 2, "ref": 1, "update_actor": 2}


def test_info_states_the_rollout_train_split_beside_the_topology(tmp_path, capsys):
    # meta.json's split is part of the topology info promises to show (README: "model, GPUs, batch, topology")
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "healthy-colocated", run)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(topology="separated", split={"rollout": 5, "train": 3})
    (run / "meta.json").write_text(json.dumps(meta))
    assert main(["info", str(run)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("topology")]
    assert line.split(None, 1)[1] == "separated, split 5:3 (rollout:train GPUs)"


@pytest.mark.parametrize(
    ("fmt", "shown"), [("markdown", "- **topology**: one step overlap"), ("html", "<td>one step overlap</td>")]
)
def test_markdown_and_html_name_the_topology_as_the_text_report_does(capsys, fmt, shown):
    # the text report says "one step overlap", as the what-if tables of all three do; not the JSON's one_step_overlap
    assert main(["diagnose", str(SAMPLES / "moe-mismatch"), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert shown in out and "one_step_overlap" not in out.replace("one\\_step\\_overlap", "one_step_overlap")


@pytest.mark.parametrize(("fmt", "title"), [("markdown", "## Findings ({})"), ("html", "<h2>Findings ({})</h2>")])
def test_markdown_and_html_count_the_findings_by_severity_as_the_text_report_does(capsys, fmt, title):
    # the counts from the JSON document's findings themselves, most severe first
    _, doc = _run_json(capsys, str(SAMPLES / "agentic-failing-reward"))
    severities = [f["severity"] for f in doc["findings"]]
    counted = ", ".join(f"{severities.count(s)} {s}" for s in ("critical", "warn", "info") if s in severities)
    assert "critical" in counted and "warn" in counted
    assert main(["diagnose", str(SAMPLES / "agentic-failing-reward"), "--format", fmt]) == 0
    assert title.format(counted) in capsys.readouterr().out


def test_a_waterfall_whose_estimated_tail_is_unknown_says_so_in_every_format(tmp_path, capsys):
    # mean 232 of max 256, min 91: no estimate, at most (256 - 232) / (0.9 x 256) of the 20 s rollout. 1 GPU at a
    # toy 1e12 peak, 1000 tokens a 40 s step: gen 2e12 FLOPs (2 GPU-s of 20), update_actor 6e12 (6 of 20), MFU 20%
    data = {"timing_s/gen": 20.0, "timing_s/update_actor": 20.0, "timing_s/step": 40.0, "perf/total_num_tokens": 1e3}
    data |= {"response_length/mean": 232.0, "response_length/max": 256.0, "response_length/min": 91.0}
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": data}) + "\n" for s in range(1, 5)))
    args = [str(log), "--gpus", "1", "--peak-tflops", "1", "--active-params", "1e9"]
    code, doc = _run_json(capsys, *args)
    most = 100 * 24 / 230.4 * 20 / 40
    assert code == 0 and doc["mfu"]["mfu"] == pytest.approx(0.2) and doc["mfu"]["tail_unknown"] is True
    points = doc["mfu"]["waterfall_points"]
    assert points["decode_long_tail"] == pytest.approx(45.0) and points["decode"] is points["long_tail"] is None
    assert doc["mfu"]["tail_unknown_steps"] == [4]  # the recent quarter of 4 steps
    assert doc["mfu"]["tail_points_max"] == pytest.approx(most)
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", *args, "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "decode + long tail (split unknown)" in out and f"at most {most:.1f} points" in out
        assert "decode throughput" not in out


def test_a_mixed_window_draws_its_known_steps_split_and_its_unknown_steps_merged_in_every_format(tmp_path, capsys):
    # 24 steps of 20 s gen + 20 s update_actor, 1 GPU at a toy 1e12 peak, 1000 tokens: 2 and 6 useful GPU-s a step.
    # The recent quarter is steps 19-24: 19-21 mean 50 of max 256, f = 1 - 50 ln 10 / 256; 22-24 mean 232 (min 91),
    # no estimate, at most b = 24 / 230.4. Over 6 x 40 GPU-s: decode 3 (18 - 20 f), tail 3 x 20 f, unsplit 3 x 18
    f, b = 1 - 50 * math.log(10) / 256, 24 / 230.4
    data = {"timing_s/gen": 20.0, "timing_s/update_actor": 20.0, "timing_s/step": 40.0, "perf/total_num_tokens": 1e3}
    data |= {"response_length/max": 256.0, "response_length/min": 1.0}
    lines = [{"step": s, "data": data | ({"response_length/mean": 50.0} if s < 22 else _BUNCHED)} for s in range(1, 25)]
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = [str(log), "--gpus", "1", "--peak-tflops", "1", "--active-params", "1e9"]
    code, doc = _run_json(capsys, *args)
    points = doc["mfu"]["waterfall_points"]
    assert code == 0 and doc["mfu"]["tail_unknown"] is True and doc["mfu"]["tail_unknown_steps"] == [22, 23, 24]
    assert points["decode"] == pytest.approx(100 * 3 * (18 - 20 * f) / 240)
    assert points["long_tail"] == pytest.approx(100 * 3 * 20 * f / 240)
    assert points["decode_long_tail"] == pytest.approx(100 * 3 * 18 / 240)
    assert sum(points.values()) + 100 * doc["mfu"]["mfu"] == pytest.approx(100.0)
    most = 100 * 3 * 20 * b / 240
    assert doc["mfu"]["tail_points_max"] == pytest.approx(most)
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", *args, "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())
        for bar in ("decode throughput", "long tail (estimated)", "decode + long tail (split unknown)"):
            assert bar in out, (fmt, bar)
        assert "no long tail is known in steps 22-24" in out.lower() and f"at most {most:.1f} points" in out


_BUNCHED = {"response_length/mean": 232.0, "response_length/min": 91.0}


def test_a_what_if_whose_estimated_tail_is_unknown_says_its_async_gain_is_a_lower_bound(tmp_path, capsys):
    # 8 GPUs, gen 60 s + update_actor 40 s, lengths mean 232 of max 256 (tail unknown, at most 24 / 230.4 of
    # generation): async over colocated is at least 1.00x (no tail), at most 1 / (1 - (24 / 230.4) 60 / 100)
    data = {"timing_s/gen": 60.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0}
    data |= {"response_length/mean": 232.0, "response_length/max": 256.0, "response_length/min": 91.0}
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": data}) + "\n" for s in range(1, 5)))
    most = 1 / (1 - 24 / 230.4 * 60 / 100)
    code, doc = _run_json(capsys, str(log), "--gpus", "8")
    assert code == 0 and doc["topology"]["tail_unknown"] is True and doc["headline"]["async_speedup"] == 1.0
    assert doc["topology"]["async_speedup_max"] == doc["headline"]["async_speedup_max"] == pytest.approx(most)
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", str(log), "--gpus", "8", "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "no long tail modelled, its estimate unknown" in out and f"would add up to {most:.2f}x more" in out


def test_a_tail_with_no_estimate_and_no_bound_is_reported_without_a_number(tmp_path, capsys):
    # a mean above the max (300 of 256: lengths that contradict each other) gives neither an estimate nor its bound
    # (max - mean < 0); 8 GPUs, gen 60 s + update_actor 40 s, with the facts MFU needs: every format must still
    # print, say the tail is unknown, and give no bound rather than a "nan" or a traceback
    data = {"timing_s/gen": 60.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0, "perf/total_num_tokens": 1e3}
    data |= {"response_length/mean": 300.0, "response_length/max": 256.0}
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": data}) + "\n" for s in range(1, 5)))
    args = [str(log), "--gpus", "8", "--peak-tflops", "1", "--active-params", "1e9"]
    code, doc = _run_json(capsys, *args)
    assert code == 0 and doc["topology"]["tail_unknown"] is True and doc["headline"]["async_speedup_max"] is None
    assert doc["mfu"]["tail_unknown"] is True and doc["mfu"]["tail_points_max"] is None
    for fmt in ("text", "markdown", "html"):
        assert main(["diagnose", *args, "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "no long tail modelled, its estimate unknown" in out and "no bound either" in out
        # the run logged response lengths: its tail is no "n/a (needs ... response_length/mean ...)"
        assert "needs trajectory finish times" not in out and "neither an estimate nor a bound" in out
        assert "holds no bound" not in out and "no bound on the tail" in out  # html escapes the apostrophe
        prose = re.sub(r"<script.*?</script>", "", out, flags=re.DOTALL)  # html: plotly's own code says NaN
        assert not re.search(r"\bnan\b", prose, re.IGNORECASE)


def test_generation_beside_a_much_longer_step_is_said_as_a_part_of_its_length():
    from rlscope.report._format import generation_beside

    # 12.5 s of an async trainer's wait beside its 750 s step is 2% of its length, not "0.0x"; 200 s beside a
    # 40 s step stays 5.0x (as a share it would read 500%)
    assert generation_beside(12.5 / 750) == "beside the step (2% of its length)"
    assert generation_beside(200 / 40) == "beside the step (5.0x its length)"


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found (set RLSCOPE_REAL_LOGS)")
def test_a_real_tail_growth_leaves_out_the_steps_at_the_length_cap(capsys):
    # TinyZero, max response 256: steps 2 and 52 have 37.5% and 28.1% of responses at the cap (estimate 0:
    # the slowest 10% stop there together), steps 92 and 122 3.1% at most. Below the cap f = 1 - mean ln 10 /
    # max: step 92 mean 57.969 of max 199, step 122 mean 61.094 of 256: 33% -> 45%, not 0% -> 45%
    first, last = 1 - 57.969 * math.log(10) / 199, 1 - 61.094 * math.log(10) / 256
    _, doc = _run_json(capsys, str(REAL_LOGS / "15_tinyzero_countdown_ppo_4090.log"))
    tail = doc["long_tail"]
    assert [r["clip_ratio"] for r in tail["per_step"]] == [0.375, 0.281, 0.0, 0.031]
    assert [r["tail_share"] for r in tail["per_step"]][:2] == [0, 0]
    assert tail["capped_steps"] == [2, 52] and tail["growth_judged"] is True
    assert doc["headline"]["tail_capped_steps"] == [] and doc["headline"]["tail_share"] == pytest.approx(last)
    (f,) = [f for f in doc["findings"] if f["id"] == "long-tail-growing"]
    assert (f["evidence"]["first"], f["evidence"]["last"]) == (pytest.approx(first), pytest.approx(last))
    assert f["evidence"]["capped_steps"] == [2, 52]
    assert f["title"] == (
        "tail share grew from 33% to 45% of rollout time "
        "(estimated from response lengths; steps 2, 52 at the length cap left out)"
    )
    assert "28-38% of their responses hit the length cap" in f["recommendation"]


def test_a_recent_share_with_steps_at_the_length_cap_says_they_count_zero(tmp_path, capsys):
    # 8 steps of 100 s generation, max 256: the recent quarter is steps 6-7, step 6 at 1 - 20 ln 10 / 256 and
    # step 7 at the cap (40% of responses), whose estimate is 0 by the cap. The recent share is their mean,
    # and the headline names the step whose 0 is the cap's
    run = tmp_path / "run"
    with Recorder(run) as rec:
        for s in range(8):
            mean, clip = (200, 0.4) if s == 7 else (20, 0.0) if s == 6 else (100, 0.0)
            rec.log_step(
                s,
                {
                    "timing_s/gen": 100.0,
                    "response_length/mean": mean,
                    "response_length/max": 256.0,
                    "response_length/clip_ratio": clip,
                },
            )
    _, doc = _run_json(capsys, str(run))
    assert doc["headline"]["tail_capped_steps"] == [7] and doc["long_tail"]["growth_judged"] is False
    assert doc["headline"]["tail_share"] == pytest.approx((1 - 20 * math.log(10) / 256) / 2)
    assert main(["diagnose", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # as wrapped to any width
    assert "[estimated; step 7 at the length cap counts 0: over 10% of its responses hit it" in out


_SPY_ON_THE_FIRST_READ = """
import sys
from rlscope.trace.reader import RunReader

prefetch = RunReader.prefetch

def spy(self, table, *args, **kwargs):
    print("prefetch", table, "rlscope.analyzers" in sys.modules, "pandas" in sys.modules, flush=True)
    return prefetch(self, table, *args, **kwargs)

RunReader.prefetch = spy
from rlscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["diagnose", "compare"])
def test_the_trajectories_are_read_while_the_analysis_is_imported(tmp_path, command):
    import subprocess

    run = str(SAMPLES / "longtail-8b")
    args = [command, run, "--format", "json"] if command == "diagnose" else [command, run, run]
    out = subprocess.run(
        [sys.executable, "-c", _SPY_ON_THE_FIRST_READ, *args], capture_output=True, text=True, check=True
    ).stdout
    first = out.splitlines()[0]
    assert first == "prefetch trajectories False False"  # begun before pandas and the analyzers were imported
    if command == "diagnose":
        assert json.loads(out[out.index("{") :])["run"]["steps"] == 10


def test_a_progress_hook_that_raises_leaves_no_analyzer_waiting():
    # Ctrl-C (KeyboardInterrupt) can land in the progress bar's tick, between two analyzers: the
    # analysis must fail, and the second thread's analyzers waiting on the first's results with it
    seen: list[str] = []

    def tick(stage: str) -> None:
        seen.append(stage)
        if stage == "anatomy":
            raise KeyboardInterrupt

    finished = threading.Event()

    def analyse() -> None:
        with pytest.raises(KeyboardInterrupt):
            analyze_run(str(SAMPLES / "agentic-failing-reward"), on_stage=tick)
        finished.set()

    threading.Thread(target=analyse, daemon=True).start()
    assert finished.wait(timeout=120), "the analysis hung"
    before = {t.name for t in threading.enumerate() if t.name.startswith("rlscope-analyze")}
    for thread in [t for t in threading.enumerate() if t.name in before]:
        thread.join(timeout=120)  # the engine balance, waiting on the anatomy, fails and ends
        assert not thread.is_alive(), "an analyzer thread was left waiting"


@pytest.mark.parametrize("name", ["rewards", "anatomy"])
def test_an_analyzer_that_fails_on_either_thread_fails_the_analysis(monkeypatch, name):
    import importlib

    # rewards runs beside the others; the engine balance, beside them too, waits for the anatomy's
    # result: a failed anatomy must fail it as well, not leave it waiting
    def broken(*_args, **_kwargs):
        raise RuntimeError(f"the {name} analyzer broke")

    monkeypatch.setattr(importlib.import_module(f"rlscope.analyzers.{name}"), "analyze", broken)
    raised: list[BaseException] = []

    def analyse() -> None:
        try:
            analyze_run(str(SAMPLES / "agentic-failing-reward"))
        except RuntimeError as exc:
            raised.append(exc)

    worker = threading.Thread(target=analyse, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the analysis hung"
    assert [str(e) for e in raised] == [f"the {name} analyzer broke"]


def test_the_program_ends_at_once_with_all_it_wrote_and_its_exit_code(tmp_path):
    import subprocess

    # diagnose ends its process without the interpreter's teardown (cli.run): what it wrote to a pipe
    # must still arrive whole, and --fail-on's exit code stand
    agentic = str(SAMPLES / "agentic-failing-reward")  # a critical finding
    done = subprocess.run(
        [sys.executable, "-m", "rlscope", "diagnose", agentic, "--format", "json", "--fail-on", "critical"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 3
    doc = json.loads(done.stdout)
    assert any(f["severity"] == "critical" for f in doc["findings"]) and done.stdout.endswith("}\n")
    unreadable = tmp_path / "no-run"
    done = subprocess.run(
        [sys.executable, "-m", "rlscope", "diagnose", str(unreadable)], capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stderr.startswith("rlscope: ") and "no-run" in done.stderr
    usage = subprocess.run([sys.executable, "-m", "rlscope", "diagnose", agentic, "--gpus", "x"], capture_output=True)
    assert usage.returncode == 2  # argparse's exit, kept
    # a report to a file with stdout closed (a cron job's >&-): nothing to flush, a clean exit
    out = tmp_path / "r.json"
    closed = subprocess.run(
        f'"{sys.executable}" -m rlscope diagnose "{agentic}" --format json -o "{out}" >&-',
        shell=True,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert closed.returncode == 0 and closed.stderr == "" and json.loads(out.read_text())["run"]["steps"] > 0


def test_unreadable_segments_are_listed_by_path_whichever_thread_read_them(tmp_path, capsys):
    # GPU idle reads the gpu table on the second thread while the steps are read on the first: the
    # report lists what did not read in one order, by path, however the two threads ran
    run = tmp_path / "run"
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        for step in (1, 2):
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 12.0})
            rec.log_gpu(
                [{"time": float(step * 10 + i), "gpu": 0, "role": "trainer", "util_pct": 50.0} for i in range(5)]
            )
            rec.flush()  # a segment per step and table
    damage_column(sorted((run / "steps").glob("*.parquet"))[0], "value")
    damage_column(sorted((run / "gpu").glob("*.parquet"))[0], "util_pct")
    for _ in range(3):
        code, doc = _run_json(capsys, str(run))
        unread = [w for w in doc["run"]["warnings"] if "unreadable" in w]
        assert code == 0 and len(unread) == 2
        assert "/gpu/" in unread[0] and "/steps/" in unread[1]

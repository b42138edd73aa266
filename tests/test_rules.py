"""rules/ and the Grafana dashboard: promtool passes, every alert is complete and tested, and
every metric they use is one the exporter serves (the contract between the three).

promtool comes from Debian's ``prometheus`` package
(``apt-get install -y --no-install-recommends prometheus``); without it the promtool tests
are skipped and the structural and contract tests still run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from prometheus_client import CollectorRegistry

from rlscope import Recorder, RunReader
from rlscope.advice import thresholds
from rlscope.advice.catalogue import CATALOGUE
from rlscope.analyzers import analyze_run
from rlscope.exporter import METRICS, RLScopeCollector
from rlscope.exporter._state import STALL_FIRST_STEP_SECONDS, STALL_FOR_SECONDS, STALL_STEP_FACTOR
from rlscope.trace.store import write_segment

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "rules"
DASHBOARD = ROOT / "dashboards" / "grafana" / "rlscope.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install -y --no-install-recommends prometheus)"
)

# Finding ids that only a live monitor can see, so no analyzer of a run directory emits them.
LIVE_ONLY_IDS = {"run-stalled"}

# recorded threshold -> the analyzers' constant it must equal
SHARED_THRESHOLDS = {
    "rlscope:idle_ratio_high:threshold": thresholds.IDLE_RATIO_HIGH,
    "rlscope:idle_ratio_low:threshold": thresholds.IDLE_RATIO_LOW,
    "rlscope:reward_error_ratio:threshold": thresholds.REWARD_ERROR_WARN,
    "rlscope:reward_error_ratio_critical:threshold": thresholds.REWARD_ERROR_CRITICAL,
    "rlscope:reward_zero_collapse_ratio:threshold": thresholds.REWARD_ZERO_COLLAPSE,
    "rlscope:reward_zero_rise_min:threshold": thresholds.REWARD_ZERO_RISE_MIN,
    "rlscope:staleness_p90:threshold": thresholds.STALENESS_P90_WARN,
    "rlscope:tail_share:threshold": thresholds.LONG_TAIL_WARN,
    "rlscope:gpu_idle_utilization:threshold": thresholds.GPU_IDLE_UTIL_PCT / 100,
}

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
_KEYWORDS |= {"inf", "nan", "atan2"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels and numbers left out).

    A small scanner rather than a parser: it drops strings, label matchers, ranges and
    grouping clauses, then keeps identifiers that are not called (functions) or keywords.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[A-Za-z_:][\w:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def _rules(name: str) -> list[dict]:
    return [rule for group in yaml.safe_load((RULES / name).read_text())["groups"] for rule in group["rules"]]


def _alerts() -> list[dict]:
    return _rules("alerts.yml")


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


def _template_queries(annotations: dict[str, str]) -> list[str]:
    return [q for text in annotations.values() for q in re.findall(r'query "([^"]+)"', text)]


def _dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    panels = [p for top in board["panels"] for p in [top, *top.get("panels", [])]]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        query = var.get("query")
        if var["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


# -- promtool ----------------------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules():
    done = subprocess.run(
        [PROMTOOL, "check", "rules", "recording.yml", "alerts.yml"],
        cwd=RULES,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_unit_tests():
    files = sorted(str(p.relative_to(ROOT)) for p in (RULES / "tests").glob("*.yml"))
    done = subprocess.run([PROMTOOL, "test", "rules", *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(files)


_REWARD_GAUGES = ("rlscope_reward_error_ratio", "rlscope_reward_zero_ratio", "rlscope_reward_zero_ratio_baseline")


def _exported_rewards(run: Path, source: str) -> dict[str, float | None]:
    """The reward gauges the exporter serves for ``source`` of ``run``."""
    registry = CollectorRegistry()
    RLScopeCollector([run], registry=registry, min_refresh_s=0)
    labels = {"run": run.name, "source": source}
    return {name: registry.get_sample_value(name, labels) for name in _REWARD_GAUGES}


def _promtool_test(tmp_path: Path, series: list[dict], checks: dict) -> subprocess.CompletedProcess:
    """One promtool unit test of the rules: ``series`` sampled every minute, ``checks`` its
    expectations (``promql_expr_test`` or ``alert_rule_test``)."""
    test = {
        "rule_files": [str(RULES / "recording.yml"), str(RULES / "alerts.yml")],
        "evaluation_interval": "1m",
        "group_eval_order": ["rlscope-thresholds", "rlscope-recording", "rlscope-alerts"],
        "tests": [{"interval": "1m", "input_series": series, **checks}],
    }
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(test))
    return subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)


@needs_promtool
def test_a_single_source_collapse_fires_as_diagnose_reports_it(tmp_path):
    # the run's one source scores 0 on 30% of its 20 samples in steps 1-30, then on 95% (19 of 20)
    run = tmp_path / "single"
    with Recorder(run, meta={"gpu_count": 8}) as rec:
        for step in range(1, 41):
            zeros = 6 if step <= 30 else 19
            rows = [{"data_source": "math", "reward": float(i >= zeros), "reward_status": "ok"} for i in range(20)]
            rec.log_trajectories(step, rows)
    (found,) = [f for f in analyze_run(run).findings if f.id == "reward-source-zero-collapse"]
    labels = {"run": "single", "source": "math"}
    exported = _exported_rewards(run, "math")
    # the run's last 5 steps (36-40) against steps 1-30 (31-35, 95% zeros, are no baseline)
    assert exported == {
        "rlscope_reward_error_ratio": 0.0,
        "rlscope_reward_zero_ratio": pytest.approx(0.95),
        "rlscope_reward_zero_ratio_baseline": pytest.approx(0.3),
    }
    selector = '{job="rlscope",instance="i",run="single",source="math"}'
    series = [{"series": name + selector, "values": f"{value}x20"} for name, value in exported.items()]
    firing = {"alertname": "RLScopeRewardSourceZeroCollapse", "job": "rlscope", "instance": "i", **labels}
    firing["severity"] = {"warn": "warning", "critical": "critical"}[found.severity.value]
    firing["alertstate"] = "firing"
    alerts = "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in firing.items()) + "}"
    check = {"expr": 'ALERTS{alertstate="firing"}', "eval_time": "10m", "exp_samples": [{"labels": alerts, "value": 1}]}
    done = _promtool_test(tmp_path, series, {"promql_expr_test": [check]})
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
@pytest.mark.parametrize("solved", [{3, 9, 14, 21, 27}, {1, 9, 14, 21, 27}])
def test_a_source_hard_all_along_stays_silent_as_diagnose_leaves_it(tmp_path, solved):
    # one group of 8 a step, half solved in 5 of 30 steps: 92% zeros from the start, not a collapse
    # (nor when the first step happens to be one of those solved)
    run = tmp_path / "hard"
    with Recorder(run, meta={"gpu_count": 8}) as rec:
        for step in range(1, 31):
            rows = [{"data_source": "hard", "reward": float(step in solved and i < 4)} for i in range(8)]
            rec.log_trajectories(step, [{**r, "reward_status": "ok"} for r in rows])
    assert not [f for f in analyze_run(run).findings if f.id == "reward-source-zero-collapse"]
    exported = _exported_rewards(run, "hard")
    assert None not in exported.values()
    selector = '{job="rlscope",instance="i",run="hard",source="hard"}'
    series = [{"series": n + selector, "values": f"{v}x30"} for n, v in exported.items()]
    silent = {"eval_time": "30m", "alertname": "RLScopeRewardSourceZeroCollapse", "exp_alerts": []}
    done = _promtool_test(tmp_path, series, {"alert_rule_test": [silent]})
    assert done.returncode == 0, done.stdout + done.stderr


_CLOCK = (
    "rlscope_last_step_timestamp_seconds",
    "rlscope_step_median_seconds",
    "rlscope_validation_timestamp_seconds",
    "rlscope_job_start_timestamp_seconds",
)


def _served_clock(run: Path, writes: dict[int, Callable[[], None]], minutes: int) -> list[dict]:
    """The stall clock's metrics as the exporter serves ``run`` each minute up to ``minutes``, for
    promtool (times are unix seconds from 0, as promtool's): ``writes[m]`` writes to the run
    just before minute ``m`` is scraped."""
    registry = CollectorRegistry()
    RLScopeCollector([run], registry=registry, min_refresh_s=0)
    values: dict[str, list[str]] = {name: [] for name in _CLOCK}
    for minute in range(minutes + 1):
        if minute in writes:
            writes[minute]()
        for name in _CLOCK:
            value = registry.get_sample_value(name, {"run": run.name})
            values[name].append("_" if value is None else repr(value))
    selector = f'{{job="rlscope",instance="i",run="{run.name}"}}'
    return [{"series": name + selector, "values": " ".join(v)} for name, v in values.items() if set(v) != {"_"}]


def _stalled(run: str, minutes: int) -> dict:
    """RLScopeRunStalled of ``run`` firing at ``minutes`` (its "for" begun 5 minutes before)."""
    labels = {"alertname": "RLScopeRunStalled", "alertstate": "firing", "instance": "i", "job": "rlscope", "run": run}
    alerts = "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in {**labels, "severity": "critical"}.items()) + "}"
    expr = f'ALERTS{{alertname="RLScopeRunStalled",alertstate="firing",run="{run}"}}'
    return {"expr": expr, "eval_time": f"{minutes}m", "exp_samples": [{"labels": alerts, "value": 1}]}


def _silent(alertname: str, minutes: int) -> dict:
    return {"eval_time": f"{minutes}m", "alertname": alertname, "exp_alerts": []}


@needs_promtool
def test_a_resumed_job_s_warm_up_does_not_page_and_its_restarts_do_not_restart_the_clock(tmp_path):
    # steps 1-10 a minute apart (timing_s/step 60 s), the last at 0; a crash; verl resumes from a
    # checkpoint without val_before_train: its driver starts at 5m, crashes in its warm-up and starts
    # again at 25m and 45m, never logging a step. Stalled an hour after the first start (at 65m),
    # firing 5 minutes on; before the resume the crash is timed from the last step (10-minute minimum)
    run = tmp_path / "resumed"
    _stopped_at_zero(run)
    write_segment(run, "jobs", pa.table({"time": [-900.0]}), writer_id="d", seq=0)  # the first job's start
    series = _served_clock(run, _starts(run, [5, 25, 45]), 80)
    # a GPU idle all along: idle by design while the job warms up, not "in training"
    gpu = 'rlscope_gpu_utilization_ratio{job="rlscope",instance="i",run="resumed",host="h",gpu="0",role="train"}'
    series.append({"series": gpu, "values": "0.02x80"})
    silent = [_silent("RLScopeRunStalled", m) for m in (4, 30, 50, 70)]
    silent += [_silent("RLScopeGPUIdleInTraining", m) for m in (30, 60)]
    done = _promtool_test(tmp_path, series, {"alert_rule_test": silent, "promql_expr_test": [_stalled("resumed", 71)]})
    assert done.returncode == 0, done.stdout + done.stderr


def _stopped_at_zero(run: Path) -> None:
    """Steps 1-10 of ``run`` a minute apart (timing_s/step 60 s), the last at minute 0, as promtool times them."""
    with Recorder(run, meta={"gpu_count": 8}) as rec:
        for step in range(1, 11):
            rec.log_step(step, {"timing_s/gen": 40.0, "timing_s/step": 60.0})
    table = RunReader(run).read("steps")  # logged now: moved to a minute apart, ending at 0
    times = [60.0 * (s - 10) for s in table.column("step").to_pylist()]
    shutil.rmtree(run / "steps")
    write_segment(run, "steps", table.set_column(2, "time", pa.array(times, pa.float64())), writer_id="w", seq=1)


def _starts(run: Path, minutes: list[int]) -> dict[int, Callable[[], None]]:
    """Writes of a job start at each minute given, each just before that minute's scrape."""

    def start(when: float) -> Callable[[], None]:
        return lambda: write_segment(run, "jobs", pa.table({"time": [when]}), writer_id="d", seq=int(when))

    return {m: start(60.0 * m) for m in minutes}


@needs_promtool
def test_a_relaunch_after_a_stall_gets_its_warm_up_and_a_slow_crash_loop_still_pages(tmp_path):
    # both stop at 0 (steps of 60 s: a job with no step is stalled after 1 h, a start 70 min after the
    # one before is a relaunch). "relaunched": a job starts at 5m and hangs, stalled from 65m, paging
    # from 71m; someone relaunches it at 130m: its warm-up is timed from then (silent until its own
    # hour is up, paging again from 196m), its GPUs idle by design meanwhile. "crashloop": its driver
    # restarts every 64 minutes (5m, 69m, 133m), never stepping: one clock, paging from 71m on
    relaunched, crashloop = tmp_path / "relaunched", tmp_path / "crashloop"
    _stopped_at_zero(relaunched)
    _stopped_at_zero(crashloop)
    series = _served_clock(relaunched, _starts(relaunched, [5, 130]), 200)
    series += _served_clock(crashloop, _starts(crashloop, [5, 69, 133]), 200)
    gpu = 'rlscope_gpu_utilization_ratio{job="rlscope",instance="i",run="relaunched",host="h",gpu="0",role="train"}'
    series.append({"series": gpu, "values": "0.02x200"})
    firing = [_stalled(run, m) for run in ("relaunched", "crashloop") for m in (71, 100, 129)]
    firing += [_stalled("crashloop", m) for m in (131, 160, 195)] + [_stalled("relaunched", 196)]
    expr = 'count(ALERTS{alertname="RLScopeRunStalled",alertstate="firing",run="relaunched"}) or vector(0)'
    firing += [{"expr": expr, "eval_time": f"{m}m", "exp_samples": [{"labels": "{}", "value": 0}]} for m in (131, 190)]
    silent = [_silent("RLScopeRunStalled", 70)] + [_silent("RLScopeGPUIdleInTraining", m) for m in (150, 190)]
    done = _promtool_test(tmp_path, series, {"alert_rule_test": silent, "promql_expr_test": firing})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_exporter_s_relaunch_gap_is_the_rules_stall_limit():
    # the exporter begins a new stall clock at a start more than the stall limit of a job with no step
    # and twice the alert's "for" after the one before: the same numbers as rules/
    recorded = {r["record"]: r["expr"].strip() for r in _rules("recording.yml")}
    assert recorded["rlscope:run_stalled_first_step_seconds:threshold"] == f"vector({STALL_FIRST_STEP_SECONDS:.0f})"
    assert recorded["rlscope:run_stalled_step_factor:threshold"] == f"vector({STALL_STEP_FACTOR:.0f})"
    (stalled,) = [a for a in _alerts() if a["alert"] == "RLScopeRunStalled"]
    assert _seconds(stalled["for"]) == STALL_FOR_SECONDS


@needs_promtool
def test_a_first_step_is_timed_from_the_job_s_start_whoever_rewrites_meta_json(tmp_path):
    # the driver logs its job's start at 0; a worker's Recorder rewrites meta.json at 20m (before, its
    # time was the clock's start); no step: stalled from 61m, firing at 66m, as if never rewritten
    run = tmp_path / "first"
    with Recorder(run, meta={"gpu_count": 8}) as rec:
        rec.log_job_start(0.0)

    def rewrite() -> None:
        with Recorder(run, meta={"split": {"rollout": 4, "train": 4}}):
            pass
        os.utime(run / "meta.json", (1200.0, 1200.0))

    series = _served_clock(run, {20: rewrite}, 70)
    checks = {"alert_rule_test": [_silent("RLScopeRunStalled", 65)], "promql_expr_test": [_stalled("first", 66)]}
    done = _promtool_test(tmp_path, series, checks)
    assert done.returncode == 0, done.stdout + done.stderr


# -- alert completeness ---------------------------------------------------------------------


def test_every_alert_is_complete():
    anchors = {m.group(1) for m in re.finditer(r"^## (\S+)$", (RULES / "runbook.md").read_text(), re.M)}
    used = set()
    for alert in _alerts():
        name = alert["alert"]
        assert _seconds(alert.get("for", "0s")) > 0, name
        assert alert["labels"]["severity"] in {"warning", "critical"}, name
        notes = alert["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(notes), name
        anchor = notes["runbook_url"].rsplit("#", 1)[1]
        assert anchor in anchors, f"{name}: runbook.md has no section '## {anchor}'"
        assert anchor in CATALOGUE or anchor in LIVE_ONLY_IDS, f"{name}: {anchor} is not a Finding id"
        used.add(anchor)
    assert used == anchors, f"runbook sections without an alert: {anchors - used}"


def test_every_alert_is_tested_silent_then_firing():
    evals: dict[str, list[tuple[str, int, bool]]] = {}
    for path in (RULES / "tests").glob("*.yml"):
        for i, test in enumerate(yaml.safe_load(path.read_text())["tests"]):
            for case in test.get("alert_rule_test", []):
                evals.setdefault(case["alertname"], []).append(
                    (f"{path.name}#{i}", _seconds(case["eval_time"]), bool(case.get("exp_alerts")))
                )
    for alert in _alerts():
        name, wait = alert["alert"], _seconds(alert["for"])
        cases = evals.get(name, [])
        # in one test: firing at or after `for`, silent at an earlier time (the condition may start late)
        shown = any(
            fires and t >= wait and any(u == test and not f and s < t for u, s, f in cases) for test, t, fires in cases
        )
        assert shown, f"{name}: no promtool test shows it silent before {alert['for']} elapses and firing after"
        exact = [
            case
            for path in (RULES / "tests").glob("*.yml")
            for test in yaml.safe_load(path.read_text())["tests"]
            for case in test.get("alert_rule_test", [])
            if case["alertname"] == name and case.get("exp_alerts")
        ]
        assert all("exp_annotations" in a and "severity" in a["exp_labels"] for c in exact for a in c["exp_alerts"])


def test_thresholds_match_the_analyzers():
    recorded = {r["record"]: r["expr"] for r in _rules("recording.yml")}
    for name, value in SHARED_THRESHOLDS.items():
        match = re.fullmatch(r"vector\(([\d.]+)\)", recorded[name].strip())
        assert match and float(match.group(1)) == pytest.approx(value), f"{name} = {recorded[name]}, analyzers {value}"


def test_every_threshold_is_used():
    defined = {r["record"] for r in _rules("recording.yml") if r["record"].endswith(":threshold")}
    exprs = [r["expr"] for r in _rules("recording.yml") + _alerts()]
    used = {n for e in exprs for n in promql_metric_names(e)}
    assert defined <= used, f"thresholds no rule uses: {defined - used}"


# -- the contract: rules and dashboard use only what the exporter serves ------------------------


def test_metric_name_extraction():
    expr = (
        'sum by (run, source) (rate(rlscope_reward_errors_total{run=~"$run", code!="x y"}[$__rate_interval])) '
        "> on(job) group_left(precision) rlscope:x:threshold * 1e-3 unless ALERTS offset 5m"
    )
    assert promql_metric_names(expr) == {"rlscope_reward_errors_total", "rlscope:x:threshold", "ALERTS"}
    assert promql_metric_names("label_values(rlscope_run_up, run)") == {"rlscope_run_up", "run"}


def test_rules_and_dashboard_use_only_exported_metrics():
    exported = {m.name for m in METRICS}
    recorded = {r["record"] for r in _rules("recording.yml")}
    rule_names = {n for r in _rules("recording.yml") + _alerts() for n in promql_metric_names(r["expr"])}
    rule_names |= {n for a in _alerts() for q in _template_queries(a["annotations"]) for n in promql_metric_names(q)}
    dash_names = {n for e in _dashboard_exprs() for n in promql_metric_names(e)}
    dash_names.discard("run")  # label_values(metric, run): the second argument is a label
    assert rule_names - recorded <= exported, (
        f"rules use metrics the exporter does not serve: {rule_names - recorded - exported}"
    )
    known = exported | recorded | {"ALERTS"}  # recording rules too: the dashboard needs rules/ loaded
    assert dash_names <= known, f"dashboard uses unknown metrics: {dash_names - known}"
    assert len((rule_names | dash_names) & exported) >= 15


def test_the_since_last_step_panel_shows_the_stall_alert_s_clock():
    # the stall alert times a run from its last step, a validation after it, or its job's start:
    # the panel must show that clock, not the last step's time alone
    board = json.loads(DASHBOARD.read_text())
    (panel,) = [p for top in board["panels"] for p in [top, *top.get("panels", [])] if p["title"] == "Since last step"]
    (target,) = panel["targets"]
    assert promql_metric_names(target["expr"]) == {"rlscope:seconds_since_last_step"}
    stalled = [a for a in _alerts() if a["alert"] == "RLScopeRunStalled"]
    assert "rlscope:seconds_since_last_step" in promql_metric_names(stalled[0]["expr"])


def test_dashboard_is_valid_grafana_json():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["schemaVersion"] >= 36
    ids = [p["id"] for top in board["panels"] for p in [top, *top.get("panels", [])]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
            assert all('run=~"$run"' in t["expr"] for t in panel["targets"]), panel["title"]

"""End to end: a real Prometheus scrapes `rlscope export` and fires exactly the alerts the run has.

The run is simulated (rlscope's simulator, no wall clock): the 8B async-streaming scenario
with answers already long (16K tokens), so the rollout pool cannot keep the trainer fed (the
trainer idles ~30% while the rollouter is busy), and a reward service that fails on 30% of
one source's samples. The simulator dates its runs to 2025, so from a live monitor's point
of view the run has also stopped logging steps: run-stalled fires too, which checks that
rule end to end. Every other alert must stay silent (not even pending), including the
zero-collapse alert on a legitimately hard source whose rewards are mostly zero.

Prometheus (Debian's ``prometheus`` package, not started as a daemon) runs on 127.0.0.1 with
a free port, a temporary data directory, 1 s scrape and evaluation intervals, and the
rules of rules/ with every ``for:`` shortened to 2 s.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from rlscope.trace.simulator import SCENARIOS, RewardFault, simulate

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (apt-get install -y --no-install-recommends prometheus)"
)

RUN = "async-failing-reward"
EXPECTED = {
    ("RLScopeRewardSourceFailing", "deepscaler"),
    ("RLScopeTrainerIdleHigh", None),
    ("RLScopeRunStalled", None),
}
DEADLINE_S = 45.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _simulated_run(path: Path) -> None:
    base = SCENARIOS["async-drift"]
    scenario = dataclasses.replace(
        base,
        name=RUN,
        batch_size=128,
        lengths=dataclasses.replace(base.lengths, mean=16_000.0, growth=0.0),
        faults=(RewardFault("deepscaler", steps=(1, 1000), rate=0.3),),
    )
    simulate(scenario, 4, path)


def _short_rules(out: Path) -> None:
    alerts = yaml.safe_load((ROOT / "rules" / "alerts.yml").read_text())
    for group in alerts["groups"]:
        for rule in group["rules"]:
            rule["for"] = "2s"
    (out / "alerts.yml").write_text(yaml.safe_dump(alerts, sort_keys=False))
    shutil.copy(ROOT / "rules" / "recording.yml", out / "recording.yml")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def test_prometheus_fires_the_run_alerts_and_no_others(tmp_path):
    _simulated_run(tmp_path / RUN)
    _short_rules(tmp_path)
    exporter = subprocess.Popen(
        [sys.executable, "-m", "rlscope", "export", str(tmp_path / RUN), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    prometheus = None
    try:
        line = exporter.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line + exporter.stderr.read()
        target = line.split()[1].removeprefix("http://").removesuffix("/metrics")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(tmp_path / "recording.yml"), str(tmp_path / "alerts.yml")],
            "scrape_configs": [{"job_name": "rlscope", "static_configs": [{"targets": [target]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = _free_port()
        with open(tmp_path / "prometheus.log", "w") as log:
            prometheus = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        alerts_url = f"http://127.0.0.1:{port}/api/v1/alerts"
        deadline = time.monotonic() + DEADLINE_S
        seen: list[dict] = []
        firing: set[tuple[str, str | None]] = set()
        while time.monotonic() < deadline and not EXPECTED <= firing:
            time.sleep(0.5)
            assert prometheus.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                seen = _get(alerts_url)["data"]["alerts"]
            except OSError:
                continue  # not listening yet
            firing = {(a["labels"]["alertname"], a["labels"].get("source")) for a in seen if a["state"] == "firing"}
        assert EXPECTED <= firing, f"after {DEADLINE_S:.0f} s: {seen}"

        time.sleep(2.5)  # two more evaluations: anything else true now would be pending or firing
        seen = _get(alerts_url)["data"]["alerts"]
        assert {(a["labels"]["alertname"], a["labels"].get("source")) for a in seen} == EXPECTED
        for alert in seen:
            assert alert["labels"]["run"] == RUN and alert["labels"]["job"] == "rlscope"
            assert alert["annotations"]["runbook_url"].startswith("rules/runbook.md#")
        failing = next(a for a in seen if a["labels"]["alertname"] == "RLScopeRewardSourceFailing")
        assert failing["labels"]["severity"] == "warning"  # as diagnose rates 30% errors: critical from 50%
        assert "deepscaler" in failing["annotations"]["summary"]
    finally:
        for proc in (prometheus, exporter):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)

"""``rlscope dashboard`` served for real and driven by headless Chromium (Playwright).

One server (a subprocess on a free 127.0.0.1 port) shows a run that a Recorder keeps
growing in a thread, plus three sample traces. Every page must render with no browser
console error; the growing run must show its new steps after a refresh, also from a second
server whose every render outlasts its refresh tick, and keep the pace of a render and a tick
after an answer is lost; the compare view must overlay two runs; data strings must stay text. Screenshots go to test-artifacts/dashboard/
(and, with RLSCOPE_DOCS_SCREENSHOTS=1, the README's two to docs/img/). The HTTP tests need
no browser and also run where Chromium is missing.

Chromium is Debian's (apt-get install -y --no-install-recommends chromium); Playwright's
own browser download is never used.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlscope import Recorder
from rlscope.dashboards.app import STUCK_TICKS

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ["healthy-colocated", "agentic-failing-reward", "separated-8b"]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
PAGES = {"overview": "/", "rollout": "/rollout", "async": "/async", "mismatch": "/mismatch",
         "rewards": "/rewards", "gpu": "/gpu", "advice": "/advice"}  # fmt: skip
MARKUP_SOURCE = '<b>bold</b><img src="x" onerror="window.__rlscope_xss=1">'
STEP_PERIOD_S = 1.0
# the writer stops by itself even if the test does not stop it; after 10 minutes, not 90 s, so that the
# growing test, which runs after the page tests, still sees new steps on a loaded machine
MAX_STEPS = 600


def _write_step(rec: Recorder, step: int, rng: np.random.Generator, t0: float) -> None:
    """One colocated step of a small run: metrics, spans, 64 trajectories, NVML samples, log-prob deltas."""
    gen, fwd, train = 20.0 + step, 4.0, 8.0
    start = t0 + (step - 1) * 40.0
    rec.log_step(
        step,
        {
            "timing_s/gen": gen,
            "timing_s/old_log_prob": fwd,
            "timing_s/update_actor": train,
            "timing_s/step": gen + fwd + train + 1.0,
            "perf/total_num_tokens": 64 * 1500,
        },
    )
    finish = np.sort(rng.uniform(2.0, gen, 64))
    rec.log_trajectories(
        step,
        [
            {
                "traj_id": f"{step}-{i}",
                "data_source": MARKUP_SOURCE if i % 2 else "math",
                "response_tokens": int(200 + 20 * f),
                "prompt_tokens": 300,
                "finish_time": float(f),
                "submit_time": 0.0,
                "engine": f"engine-{i % 4}",
                "policy_version_start": step - 1 - (i % 2),
                "trainer_version": step - 1,
                "aborted": False,
                "reward": float(i % 3 == 0),
                "reward_status": "ok",
            }
            for i, f in enumerate(finish)
        ],
    )
    t = start
    for phase, seconds, role in (
        ("gen", gen, "rollout"),
        ("old_log_prob", fwd, "trainer"),
        ("update_actor", train, "trainer"),
    ):
        rec.log_span(step, phase, t, t + seconds, role=role, host="node-0")
        t += seconds
    rec.log_span(step, "step", start, t, role="trainer", host="node-0")
    times = np.arange(start, t, 2.0)
    rec.log_gpu(
        {
            "time": float(x),
            "host": "node-0",
            "gpu": g,
            "role": "actor_rollout",
            "util_pct": 90.0 if x < start + gen else 40.0,
        }
        for g in range(2)
        for x in times
    )
    rec.log_logprob_delta(step, rng.normal(0, 1e-3, 4096))
    rec.flush()


@pytest.fixture(scope="module")
def growing_run(tmp_path_factory) -> Iterator[tuple[Path, threading.Event]]:
    """A run with 3 steps, then one more every STEP_PERIOD_S seconds until stopped (at most MAX_STEPS)."""
    path = tmp_path_factory.mktemp("growing") / "growing-run"
    meta = {"model": {"active_params": 1.5e9}, "gpu": {"type": "H100-SXM-80GB", "count": 8}, "topology": "colocated"}
    rec = Recorder(path, meta=meta, flush_interval=3600)
    rng = np.random.default_rng(0)
    t0 = 1.75e9
    for step in (1, 2, 3):
        _write_step(rec, step, rng, t0)
    stop = threading.Event()

    def grow() -> None:
        step = 4
        while step <= MAX_STEPS and not stop.wait(STEP_PERIOD_S):
            _write_step(rec, step, rng, t0)
            step += 1

    thread = threading.Thread(target=grow, daemon=True)
    thread.start()
    yield path, stop
    stop.set()
    thread.join(10)
    rec.close()


@contextlib.contextmanager
def _started(command: list[str]) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``command`` (an ``rlscope dashboard`` on port 0) until the block ends; yields the first line
    it printed, and the process."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline(), proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _serve(command: list[str]) -> Iterator[str]:
    """Run ``command`` (an ``rlscope dashboard`` on port 0) until the test is done; yields its base URL."""
    with _started(command) as (line, proc):
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert match, f"no address printed: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        yield match.group(0)


@pytest.fixture(scope="module")
def server(growing_run) -> Iterator[str]:
    """``rlscope dashboard`` in a subprocess on a free loopback port; yields its base URL."""
    dirs = [str(growing_run[0]), *(str(ROOT / "sample_traces" / s) for s in SAMPLES)]
    yield from _serve([sys.executable, "-m", "rlscope", "dashboard", *dirs, "--port", "0", "--refresh", "1"])


# A dashboard whose every callback first waits SLOW_RENDER_S seconds (in _common.select, which every
# page callback and the header's status call), so that each render takes longer than its refresh tick
# however fast or loaded the machine is.
SLOW_TICK_S = 0.5
SLOW_RENDER_S = 2 * SLOW_TICK_S
_SLOW_DASHBOARD = """
import sys, time
from rlscope.cli import main
from rlscope.dashboards.pages import _common
select = _common.select
def slow_select(values):
    time.sleep(float(sys.argv[1]))
    return select(values)
_common.select = slow_select
sys.exit(main(["dashboard", *sys.argv[2:]]))
"""


@pytest.fixture
def slow_server(growing_run) -> Iterator[str]:
    """The growing run served with a refresh tick of SLOW_TICK_S and renders of SLOW_RENDER_S and more."""
    yield from _serve(
        [sys.executable, "-c", _SLOW_DASHBOARD, str(SLOW_RENDER_S), str(growing_run[0]),
         "--port", "0", "--refresh", str(SLOW_TICK_S)]
    )  # fmt: skip


@pytest.mark.parametrize("samples, runs", [(SAMPLES[:1], "1 run"), (SAMPLES[:2], "2 runs")])
def test_the_start_line_counts_the_runs_it_serves(samples, runs):
    dirs = [str(ROOT / "sample_traces" / s) for s in samples]
    with _started([sys.executable, "-m", "rlscope", "dashboard", *dirs, "--port", "0"]) as (line, _):
        assert re.fullmatch(rf"serving http://127\.0\.0\.1:\d+/ for {runs}; Ctrl-C stops\n", line), line


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium: apt-get install -y --no-install-recommends chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.errors = []  # console errors and uncaught exceptions seen on this page
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    context.close()


def _rendered(page, timeout_s: float = 60) -> None:
    """Wait until the page's graphs are drawn and none still shows the 'loading' placeholder (a
    minute at most: on a quiet machine it takes a second or two, on a shared one under load much longer)."""
    page.wait_for_selector(".js-plotly-plot", timeout=timeout_s * 1000)
    page.wait_for_function(
        "() => ![...document.querySelectorAll('.annotation-text')].some(e => e.textContent === 'loading')",
        timeout=timeout_s * 1000,
    )


def _legend(page) -> list[str]:
    return page.eval_on_selector_all(".legendtext", "els => els.map(e => e.textContent)")


def test_every_page_renders_without_console_errors(server, page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, path in PAGES.items():
        page.goto(f"{server.rstrip('/')}{path}?runs=2")
        _rendered(page)
        page.wait_for_timeout(300)
        body = page.inner_text("body")
        assert "could not" not in body, f"{name}: {body[:500]}"
        assert page.locator(".js-plotly-plot").count() >= 1, name
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert page.errors == []


def _latest_step(page) -> int:
    return int(re.search(r"latest step (\d+)", page.inner_text(".rls-cards")).group(1))


def _wait_for_step_after(page, step: int, timeout_s: float = 60) -> int:
    """Wait until the Overview's headline shows a latest step past ``step`` + 1; that step."""
    page.wait_for_function(
        f"() => (/latest step (\\d+)/.exec(document.querySelector('.rls-cards').innerText) || [0, 0])[1] > {step + 1}",
        timeout=timeout_s * 1000,
    )
    return _latest_step(page)


def test_growing_run_shows_new_steps_after_a_refresh(server, page):
    page.goto(server + "?runs=0")
    _rendered(page)
    first = _latest_step(page)
    later = _wait_for_step_after(page, first)
    bars = page.evaluate(
        "() => Array.from(document.querySelector('#overview-phases .js-plotly-plot')._fullData[0].x, Number)"
    )
    assert later > first + 1 and max(bars) >= later - 1  # the chart grew too (it may lag the headline by a tick)
    page.screenshot(path=str(ARTIFACTS / "growing-overview.png"), full_page=True)
    assert page.errors == []


def test_a_render_slower_than_the_refresh_is_shown_and_refreshed(slow_server, page):
    """Each render outlasts the tick: the page must still show it, then the next one, and the browser
    must not ask for the page again while its previous render is in flight (Dash would drop that one)."""
    in_flight, overlapped = set(), []

    def is_overview(request) -> bool:
        return "/_dash-update-component?" in request.url and "overview-notices" in (request.post_data or "")

    def started(request) -> None:
        if is_overview(request):
            overlapped.append(bool(in_flight))
            in_flight.add(request)

    def ended(request) -> None:
        in_flight.discard(request)

    page.on("request", started)
    page.on("requestfinished", ended)
    page.on("requestfailed", ended)
    page.goto(slow_server + "?runs=0")
    _rendered(page)
    _wait_for_step_after(page, _latest_step(page))
    assert len(overlapped) >= 2 and not any(overlapped)
    assert page.errors == []


# Counts the slow server's refresh ticks (dcc.Interval's setInterval) and records each Overview request the
# page sends: the tick it was sent at, whether another was in flight then, and whether its connection
# failed; ``window.__rlscope_hold_next`` makes the next one a request whose answer never arrives.
_WATCH_OVERVIEW = """
(() => {
    window.__rlscope_ticks = 0;
    window.__rlscope_overview = [];
    const setInterval = window.setInterval;
    window.setInterval = (fn, ms, ...rest) =>
        setInterval(ms === TICK_MS ? () => { window.__rlscope_ticks += 1; fn(); } : fn, ms, ...rest);
    const fetch = window.fetch;
    let inFlight = 0;
    window.fetch = (resource, init) => {
        const body = init && typeof init.body === "string" ? init.body : "";
        if (!String(resource).includes("/_dash-update-component") || !body.includes("overview-notices")) {
            return fetch(resource, init);
        }
        const sent = {tick: window.__rlscope_ticks, overlapped: inFlight > 0, lost: false};
        window.__rlscope_overview.push(sent);
        if (window.__rlscope_hold_next) {
            window.__rlscope_hold_next = false;
            sent.held = true;
            return new Promise(() => {});
        }
        inFlight += 1;
        const answer = fetch(resource, init);
        answer.then(() => { inFlight -= 1; }, () => { inFlight -= 1; sent.lost = true; });
        return answer;
    };
})();
""".replace("TICK_MS", str(round(SLOW_TICK_S * 1000)))


def _sent_in(page, first: int, last: int) -> list[dict]:
    """The Overview requests sent from tick ``first`` to ``last``, once the page has counted ``last``."""
    page.wait_for_function(f"() => window.__rlscope_ticks >= {last}", timeout=(last + 60) * SLOW_TICK_S * 1000)
    sent = page.evaluate("() => window.__rlscope_overview")
    return [s for s in sent if first <= s["tick"] <= last]


def test_after_an_answer_lost_to_a_failed_connection_the_refresh_keeps_its_pace(slow_server, page):
    """An Overview request whose connection fails takes no answer back: the page must go on refreshing
    at its own pace (a render and a tick), not hold the tick for STUCK_TICKS ticks after it, each time
    with nothing else in flight, and show the steps that arrive."""
    page.add_init_script(_WATCH_OVERVIEW)
    page.goto(slow_server + "?runs=0")
    _rendered(page)
    lost = []

    def lose_one(route) -> None:
        if not lost and "overview-notices" in (route.request.post_data or ""):
            lost.append(route.request.url)
            route.abort("connectionfailed")
        else:
            route.continue_()

    page.route(re.compile(r"/_dash-update-component"), lose_one)
    page.wait_for_function("() => window.__rlscope_overview.some(s => s.lost)", timeout=60_000)
    (tick,) = [s["tick"] for s in page.evaluate("() => window.__rlscope_overview") if s["lost"]]
    after = _sent_in(page, tick + 1, tick + STUCK_TICKS - 1)
    assert len(after) >= 2 and not any(s["overlapped"] or s["lost"] for s in after), after
    _wait_for_step_after(page, _latest_step(page))  # only a request sent after the lost one shows it


def test_after_an_answer_that_never_arrives_one_bounded_wait_and_the_refresh_keeps_its_pace(slow_server, page):
    """An Overview request whose answer never arrives (a tunnel that drops packets) holds the tick for
    STUCK_TICKS ticks at most; after that the page refreshes at its own pace again, not once every
    STUCK_TICKS ticks."""
    page.add_init_script(_WATCH_OVERVIEW)
    page.goto(slow_server + "?runs=0")
    _rendered(page)
    page.evaluate("() => { window.__rlscope_hold_next = true; }")
    page.wait_for_function("() => window.__rlscope_overview.some(s => s.held)", timeout=60_000)
    (tick,) = [s["tick"] for s in page.evaluate("() => window.__rlscope_overview") if s.get("held")]
    assert _sent_in(page, tick + 1, tick + STUCK_TICKS - 1) == []  # the wait: the tick held back
    after = _sent_in(page, tick + STUCK_TICKS + 1, tick + 2 * STUCK_TICKS - 1)
    assert len(after) >= 2, after
    _wait_for_step_after(page, _latest_step(page))


def test_data_strings_are_shown_as_text_not_markup(server, page):
    page.goto(server.rstrip("/") + "/rewards?runs=0")
    _rendered(page)
    assert MARKUP_SOURCE in _legend(page)  # the legend shows the tags as typed
    assert page.evaluate("() => window.__rlscope_xss") is None
    assert page.locator('img[src="x"]').count() == 0
    assert page.errors == []


def test_compare_view_overlays_two_runs(server, page):
    page.goto(server + "?runs=1,2")
    _rendered(page)
    page.wait_for_function("() => document.querySelectorAll('#overview-phases .legendtext').length >= 2")
    names = page.eval_on_selector_all("#overview-phases .legendtext", "els => els.map(e => e.textContent)")
    assert {"healthy-colocated", "agentic-failing-reward"} <= set(names)
    assert len(page.locator(".rls-cards").all()) == 2
    page.screenshot(path=str(ARTIFACTS / "compare-overview.png"), full_page=True)
    if os.environ.get("RLSCOPE_DOCS_SCREENSHOTS"):
        for name, runs in (("overview", 2), ("gpu", 3)):
            page.goto(f"{server.rstrip('/')}{PAGES[name]}?runs={runs}")
            _rendered(page)
            page.wait_for_timeout(500)
            page.locator("#react-entry-point").screenshot(path=str(ROOT / "docs" / "img" / f"dashboard-{name}.png"))
    assert page.errors == []


# -- no browser needed ---------------------------------------------------------------------


def _post_callback(server: str, output_prefix: str, runs: object) -> int:
    """POST a page callback as the browser would, with ``runs`` as the run selection; the status code."""
    with urllib.request.urlopen(server + "_dash-dependencies", timeout=10) as answer:
        deps = json.load(answer)
    dep = next(d for d in deps if d["output"].startswith(output_prefix))
    outputs = [
        dict(zip(("id", "property"), o.rsplit(".", 1), strict=True)) for o in dep["output"].strip(".").split("...")
    ]
    payload = {
        "output": dep["output"],
        "outputs": outputs,
        "inputs": [{**i, "value": runs if i["id"] == "app-runs" else 1} for i in dep["inputs"]],
        "state": [{**s, "value": None} for s in dep["state"]],
        "changedPropIds": ["app-runs.value"],
    }
    request = urllib.request.Request(
        server + "_dash-update-component",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status


@pytest.mark.parametrize(
    "runs",
    [["/etc"], "/etc/passwd", ["../../etc/passwd"], [str(ROOT / "sample_traces" / "moe-mismatch")], [99], [True]],
)
def test_a_request_naming_another_path_is_refused(server, runs):
    assert _post_callback(server, "..overview-notices", [1]) == 200  # a run on the command line is served
    assert _post_callback(server, "..overview-notices", runs) == 204  # anything else: refused, nothing read


def test_static_routes_do_not_serve_files_outside_the_package(server):
    for path in ("_dash-component-suites/dash/..%2F..%2F..%2F..%2Fetc%2Fpasswd", "assets/..%2F..%2Fetc%2Fpasswd"):
        try:
            with urllib.request.urlopen(server + path, timeout=10) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            assert exc.code in (400, 403, 404, 500)
            continue
        assert b"root:" not in body

"""The "XLA" tab: its routes over a log dir real fits wrote (TensorBoard's
WSGI app and data provider, a werkzeug test client), and the page a real
TensorBoard serves, rendered in headless Chromium."""

import html
import os
import re
import shutil
import subprocess
import warnings

import pytest
import tensorflow as tf
from conftest import conv_model, regression_data
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import (
    plugin_event_multiplexer as multiplexer_lib,
)
from tensorboard.plugins import base_plugin
from test_tensorboard_server import HOST, Server
from werkzeug import test as werkzeug_test

from keras_xla import XLATuner
from keras_xla.core import compare
from keras_xla.core.signatures import FINDING_CODES
from keras_xla.dashboard import metadata, plugin, views

ROUTE = "/data/plugin/xla"
XLA_RUN, NO_XLA_RUN = "xla/train", "no-xla/train"


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Two fits in one log dir: XLA with a partial last batch and a
    validation set (`xla/`), and without XLA (`no-xla/`)."""
    root = tmp_path_factory.mktemp("dashboard")
    x, y = regression_data(40)  # Batches of 16, 16 and a partial 8.
    vx, vy = regression_data(12, seed=1)
    reports = {}
    for name, jit in (("xla", True), ("no-xla", False)):
        tuner = XLATuner(log_dir=str(root / name), jit_compile=jit, verbose=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # The tuner warns per finding.
            conv_model().fit(
                x,
                y,
                batch_size=16,
                epochs=2,
                verbose=0,
                validation_data=(vx, vy),
                callbacks=[tuner],
            )
        reports[f"{name}/train"] = tuner.report
    return str(root), reports


def client(log_dir):
    multiplexer = multiplexer_lib.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(log_dir)
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, log_dir)
    context = base_plugin.TBContext(
        logdir=log_dir, data_provider=provider, multiplexer=multiplexer
    )
    app = application.TensorBoardWSGI(
        [plugin.XLAPlugin(context)], data_provider=provider
    )
    return werkzeug_test.Client(app)


def get_json(c, path, **query):
    response = c.get(ROUTE + path, query_string=query)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    return response.get_json()


def test_runs_lists_each_run_with_its_verdict(logs):
    log_dir, reports = logs
    body = get_json(client(log_dir), "/runs")
    assert body["empty"] is None
    assert [r["run"] for r in body["runs"]] == [NO_XLA_RUN, XLA_RUN]
    by = {r["run"]: r for r in body["runs"]}
    for run, report in reports.items():
        assert by[run]["headline"] == report.verdict.headline
        assert by[run]["compilations"] == report.total_compilations
        assert by[run]["recompilations"] == len(report.recompilations)
        assert by[run]["epochs"] == 2
    assert by[XLA_RUN]["xla_enabled"] is True
    assert by[NO_XLA_RUN]["xla_enabled"] is False
    # train 16, partial 8, validation 12: three compilations, one
    # recompilation; none without XLA.
    assert (by[XLA_RUN]["compilations"], by[XLA_RUN]["recompilations"]) == (
        3,
        1,
    )
    assert by[NO_XLA_RUN]["compilations"] == 0


def test_report_serves_verdict_recompilations_and_markers(logs):
    log_dir, reports = logs
    report = reports[XLA_RUN]
    view = get_json(client(log_dir), "/report", run=XLA_RUN)
    assert view["verdict"]["headline"] == report.verdict.headline
    assert view["verdict"]["xla_enabled"] is True
    assert view["verdict"]["compile_seconds"] == pytest.approx(
        report.verdict.compile_seconds
    )
    (rec,) = view["recompilations"]
    (expected,) = report.recompilations
    assert (rec["input"], rec["dim"], rec["cause"], rec["code"]) == (
        "x",
        0,
        "partial_batch",
        "partial-last-batch",
    )
    assert (rec["before"], rec["after"]) == ([16, 16, 4], [8, 16, 4])
    assert rec["step"] == expected.step == 2
    assert [f["code"] for f in view["findings"]] == report.finding_codes()
    # One step-time point per train call, at the global train step.
    assert [s for s, _ in view["series"]] == list(range(6))
    # The compile steps are the slow ones.
    times = dict(view["series"])
    assert min(times[0], times[2]) > max(times[1], times[4])
    # One marker per compilation, where it happened, with its cause.
    marks = [
        (m["function"], m["global_step"], m["label"], m["validation"])
        for m in view["markers"]
    ]
    assert marks == [
        ("train", 0, "first compile", False),
        ("train", 2, "partial-last-batch", False),
        ("test", 2.5, "first compile", True),
    ]
    partial = view["markers"][1]
    assert (partial["input"], partial["dim"]) == ("x", 0)
    assert partial["before"] == [16, 16, 4] and partial["after"] == [8, 16, 4]
    assert partial["seconds"] == pytest.approx(expected.compile_seconds)
    assert partial["shapes"] == {"x": [8, 16, 4], "y": [8, 1]}
    xla = view["xla"]
    assert (xla["mode"], xla["enabled"]) == ("jit_compile", True)
    assert xla["hlo"]["fusions"] == report.hlo["fusions"] > 0
    assert xla["cache"] is None and xla["decision"] is None
    # Three steps an epoch are too few for baseline windows: no band.
    assert view["baseline"] is None


def test_compare_is_the_cli_comparison(logs):
    log_dir, reports = logs
    body = get_json(client(log_dir), "/compare", a=XLA_RUN, b=NO_XLA_RUN)
    expected = compare.compare(
        reports[XLA_RUN], reports[NO_XLA_RUN], labels=(XLA_RUN, NO_XLA_RUN)
    )
    assert body["labels"] == [XLA_RUN, NO_XLA_RUN]
    assert [r["key"] for r in body["rows"]] == [k for k, *_ in compare.COMPARED]
    for served in body["rows"]:
        row = expected["rows"][served["key"]]
        assert served["values"] == pytest.approx(row["values"])
        assert served["better"] == row["better"]
    assert body["conclusion"] == expected["conclusion"]
    assert body["xla"] == [True, False]
    rows = {r["key"]: r for r in body["rows"]}
    assert rows["compilations"]["values"] == [3, 0]
    assert rows["compilations"]["better"] == NO_XLA_RUN


def test_unknown_runs_and_missing_arguments_are_refused(logs):
    c = client(logs[0])
    assert c.get(ROUTE + "/report").status_code == 400
    response = c.get(ROUTE + "/report", query_string={"run": "nope"})
    assert response.status_code == 404
    response = c.get(ROUTE + "/compare", query_string={"a": XLA_RUN})
    assert response.status_code == 400


def test_static_files_are_served_and_traversal_refused(logs):
    c = client(logs[0])
    index = c.get(ROUTE + "/index.js")
    assert index.status_code == 200 and index.mimetype == "text/javascript"
    assert b"export async function render()" in index.get_data()
    css = c.get(ROUTE + "/static/style.css")
    assert css.status_code == 200 and css.mimetype == "text/css"
    for path in (
        "/static/../plugin.py",
        "/static/..%2fplugin.py",
        "/static/%2e%2e/%2e%2e/setup.cfg",
        "/static/",
        "/static/.hidden.js",
        "/static/index.js/../../views.py",
    ):
        response = c.get(ROUTE + path)
        assert response.status_code == 404, path
        assert b"def " not in response.get_data(), path


def test_static_path_guard(tmp_path, monkeypatch):
    outside = tmp_path / "secret.js"
    outside.write_text("secret")
    static = tmp_path / "static"
    static.mkdir()
    (static / "page.js").write_text("ok")
    (static / "notes.txt").write_text("not served")
    os.symlink(outside, static / "link.js")
    monkeypatch.setattr(plugin, "STATIC_DIR", str(static))
    assert plugin.static_path("page.js") == str(static / "page.js")
    for name in ("link.js", "../secret.js", "notes.txt", "", "/etc/passwd"):
        assert plugin.static_path(name) is None, name


def test_a_log_dir_without_tuner_data_says_how_to_add_it(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        tf.summary.scalar("epoch_loss", 0.5, step=0)
    writer.close()
    c = client(str(tmp_path))
    body = get_json(c, "/runs")
    assert body["runs"] == []
    assert body["empty"] == views.ADD_THE_TUNER
    assert "XLATuner(log_dir=LOG_DIR)" in body["empty"]["code"]
    listing = c.get("/data/plugins_listing").get_json()
    assert listing["xla"]["tab_name"] == "XLA"
    assert listing["xla"]["enabled"] is False


def test_a_damaged_report_tensor_is_skipped(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        tf.summary.write(
            metadata.REPORT_TAG,
            tf.constant('{"schema": "other"}'),
            step=0,
            metadata=metadata.summary_metadata(),
        )
    writer.close()
    body = get_json(client(str(tmp_path)), "/runs")
    assert body["runs"] == [] and body["empty"] is not None


# The browser: the XLA tab's own document (the one TensorBoard's frontend
# loads in the tab's frame) from a real TensorBoard server.


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def dump_dom(url: str) -> str:
    result = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=15000",
            "--window-size=1400,1800",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return html.unescape(result.stdout)


@pytest.mark.skipif(
    chromium() is None,
    reason="no chromium binary (Debian: apt-get install chromium)",
)
def test_the_xla_tab_renders_in_a_browser(logs, tmp_path):
    from keras_xla.cli import compare as run_compare

    log_dir, reports = logs
    report = reports[XLA_RUN]
    # A `keras-xla run --compare` beside the runs: its card tops the page.
    answer = "Fastest here for 8 steps: TensorFlow with XLA, 1.00 s."
    run_compare.write(
        log_dir,
        {
            "script": "train.py",
            "answer": answer,
            "rows": [
                {"configuration": "TensorFlow with XLA", "ok": True,
                 "runs": [XLA_RUN],
                 "steps": 8, "compilations": 2, "seconds": 1.0},
                {"configuration": "JAX with XLA", "ok": False,
                 "why": "TypeError: a TensorFlow-only train_step", "runs": []},
            ],
        },
    )  # fmt: skip
    server = Server(log_dir, str(tmp_path / "tensorboard.log"))
    try:
        listing = server.poll(
            "/data/plugins_listing",
            lambda body: body.get("xla", {}).get("enabled"),
        )
        assert listing["xla"]["tab_name"] == "XLA"
        server.poll(
            ROUTE + "/runs", lambda body: len(body.get("runs", [])) == 2
        )
        base = f"http://{HOST}:{server.port}/data/plugin_entry.html?name=xla"
        dom = dump_dom(f"{base}&run={XLA_RUN}&compare={NO_XLA_RUN}")
    finally:
        server.stop()
    assert 'data-ready="true"' in dom, dom[-3000:]
    # The verdict's words.
    assert 'id="verdict"' in dom
    assert report.verdict.headline in dom
    assert "Unknown: no baseline" in dom
    # One row per recompilation, one marker per compilation.
    assert dom.count('<tr class="recompilation">') == 1
    code = FINDING_CODES[report.recompilations[0].cause]
    assert f'<code class="code">{code}</code>' in dom
    markers = re.findall(r'<g class="marker (\w+)"', dom)
    assert markers == ["first", "recompile", "validation"]
    assert len(markers) == len(report.compile_log)
    assert ">partial-last-batch</text>" in dom
    assert ">validation: first compile</text>" in dom
    # A ring per step that stood out with no compilation to explain it.
    rings = re.findall(r'<circle [^>]*class="slow ([\w-]+)"', dom)
    kinds = [s["kind"] for s in views.slow_steps(report)]
    assert sorted(rings) == sorted(kinds)
    # The first recompilation's details, shown below the chart.
    assert "[16, 16, 4] -> [8, 16, 4]" in dom
    # The two runs side by side: a row per compared figure.
    assert dom.count('<tr class="compare-row">') == len(compare.COMPARED)
    assert f"{XLA_RUN} vs {NO_XLA_RUN}" in dom
    # The run list, one row per run.
    assert dom.count('<tr class="run-row') == 2
    # The comparison's card, first: its answer, a row per configuration,
    # the one that could not run saying why.
    assert dom.index('id="comparison"') < dom.index('id="runs"')
    assert answer in dom
    assert dom.count('<tr class="comparison-row">') == 1
    assert "cannot run: TypeError: a TensorFlow-only train_step" in dom


def epoch_row(n, steps):
    """An epoch of a report's JSON: `steps` steps, nothing compiled."""
    return {
        "epoch": n,
        "steps": steps,
        "compilations": 0,
        "compile_seconds": 0.0,
        "recompilations": 0,
        "step_time_ms": {"median": 2.0, "p90": 2.0},
        "examples_per_second": 100.0,
    }


def test_the_baseline_windows_are_a_band_at_their_global_steps():
    from keras_xla.core.report import XLAReport

    report = XLAReport.from_dict(
        {
            "schema": "keras_xla.report/1",
            "epochs": [epoch_row(0, 10), epoch_row(1, 10)],
            "baseline": {
                "steps": 8,
                "no_xla_step_ms": 4.0,
                "xla_step_ms": 2.0,
                "trace_seconds": 0.3,
                "span": [[0, 6], [1, 5]],
            },
        }
    )
    band = views.baseline_band(report)
    # Epoch 1 starts at global step 10: the windows ran steps 6 to 15.
    assert band == {
        "start": 6,
        "end": 15,
        "no_xla_step_ms": 4.0,
        "xla_step_ms": 2.0,
        "first_call_seconds": 0.3,
    }
    assert views.run_view("r", report, [])["baseline"] == band
    # No windows ran: no band.
    report.baseline.span = []
    assert views.baseline_band(report) is None


def test_the_guards_fallback_is_marked_at_its_global_step():
    from keras_xla.core.report import XLAReport

    guard = {
        "action": "fallback",
        "budget": 8,
        "epoch": 1,
        "step": 3,
        "recompilations": 9,
        "compile_seconds": 4.5,
        "saved_seconds": 0.0,
        "window": 10,
        "compiled": 9,
        "input": "x",
        "dim": 1,
        "projected_compilations": 6.0,
        "projected_seconds": 3.0,
        "off_from": [1, 4],
    }
    report = XLAReport.from_dict(
        {
            "schema": "keras_xla.report/1",
            "epochs": [epoch_row(0, 10), epoch_row(1, 10)],
            "guard": guard,
        }
    )
    assert not report.skipped
    # Epoch 1 starts at global step 10: XLA off from global step 14.
    assert views.guard_fallback(report) == {
        "global_step": 14,
        "recompilations": 9,
        "compile_seconds": 4.5,
        "input": "x",
        "dims": [1],
        "projected_compilations": 6.0,
        "projected_seconds": 3.0,
        "action": "fallback",
        "kept_shapes": 0,
        "xla_steps": 0,
        "xla_seconds": 0.0,
        "plain_steps": 0,
        "plain_seconds": 0.0,
        "edges": [],
    }
    assert views.run_view("r", report, [])["guard"]["global_step"] == 14
    # Per shape: marked from the same step, with the steps each way.
    report.guard.action, report.guard.kept_shapes = "per_shape", 10
    report.guard.xla_steps, report.guard.plain_steps = 5, 1
    marked = views.guard_fallback(report)
    assert marked["global_step"] == 14 and marked["action"] == "per_shape"
    assert (marked["kept_shapes"], marked["xla_steps"]) == (10, 5)
    assert marked["plain_steps"] == 1
    # Raised or warned: XLA was never turned off, nothing to mark.
    report.guard.action = "warn"
    assert views.guard_fallback(report) is None


def test_a_bucket_edges_compilation_is_marked_as_the_plans():
    from keras_xla.core.report import Compilation, GuardSection, XLAReport

    report = XLAReport()
    report.epochs = [XLAReport.from_dict(
        {"schema": "keras_xla.report/1", "epochs": [epoch_row(0, 20)]}
    ).epochs[0]]  # fmt: skip
    report.guard = GuardSection(
        action="bucket", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, off_from=[0, 10], edges=[24],
    )  # fmt: skip
    report.compile_log = [
        Compilation("train", 0, step, {"x": [4, 8 + step]}, 0.5, step == 0)
        for step in (0, 1, 12)
    ]
    labels = [m["label"] for m in views.markers(report)]
    assert labels == ["first compile", "recompile", "bucket edge"]

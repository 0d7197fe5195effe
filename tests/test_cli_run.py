"""`keras-xla run`: a script under the tuner without an edit, and the
comparison of backends and XLA settings."""

import inspect
import json
import os
import subprocess
import sys

import pytest

from keras_xla import cli
from keras_xla.cli import compare as run_compare
from keras_xla.cli import run as run_command
from keras_xla.cli import tuner_flags
from keras_xla.core.report import XLAReport

TESTS = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(TESTS, "scripts")


def script(name):
    return os.path.join(SCRIPTS, name)


def keras_xla_run(*args, cwd=None, env=None):
    """`python -m keras_xla run ARGS` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "keras_xla", "run", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def same_figures(report):
    """What must not depend on who added the tuner."""
    return {
        "compilations": report.total_compilations,
        "steps": [e.steps for e in report.epochs],
        "recompilations": [
            (r.input, r.dim, r.before, r.after, r.cause)
            for r in report.recompilations
        ],
        "jit": (report.jit.requested, report.jit.enabled),
        "shapes": [c.shapes for c in report.compile_log],
    }


def test_a_script_runs_as_python_would_with_the_report_of_a_hand_edit(
    tmp_path,
):
    # The script as Python runs it: its argv, its exit code; Keras is
    # loaded by the script itself (the hook patched fit then).
    done = keras_xla_run(
        "--log-dir", str(tmp_path / "logs"), "--verbose", "0",
        script("fit_numpy.py"), "2", "--exit", "3",
        cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["argv"] == [script("fit_numpy.py"), "2", "--exit", "3"]
    assert printed["steps"] == 14  # 7 batches, 2 epochs: every step
    where = tmp_path / "logs" / "fit_numpy" / "fit-1"
    assert f"keras-xla run: fit-1 ({where}): " in done.stderr
    ran = XLAReport.load(str(where))
    # The same script edited by hand: its own XLATuner.
    hand = tmp_path / "hand"
    subprocess.run(
        [sys.executable, script("fit_numpy.py"), "2", "--hand", str(hand)],
        check=True,
        capture_output=True,
    )
    edited = XLAReport.load(str(hand))
    assert same_figures(ran) == same_figures(edited)
    assert ran.total_compilations == 2  # the full batches and the last 4
    assert ran.verdict.headline and edited.verdict.headline


def test_a_script_with_its_own_tuner_runs_and_gets_its_verdict(tmp_path):
    # The command adds no tuner to a fit that has one; the script's own
    # tuner's log dir and verdict are the fit's.
    own = tmp_path / "own"
    done = keras_xla_run(
        "--verbose", "0", script("fit_numpy.py"), "1", "--hand", str(own),
        cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"keras-xla run: fit-1 ({own}), the script's own tuner: " in (
        done.stderr
    )
    assert XLAReport.load(str(own)).verdict.headline
    assert not (tmp_path / "fit_numpy").exists()  # no second tuner


def test_a_script_keeps_its_own_backend_in_an_install_without_tensorflow(
    tmp_path,
):
    # The script sets KERAS_BACKEND=jax before importing Keras; this
    # process cannot import TensorFlow, as in a `[jax]` install.
    env = dict(os.environ, PYTHONPATH=os.path.join(TESTS, "no_tensorflow"))
    env.pop("KERAS_BACKEND", None)
    done = keras_xla_run(
        "--log-dir", str(tmp_path), "--verbose", "0",
        script("own_backend.py"), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == "backend jax"
    report = XLAReport.load(str(tmp_path / "own_backend" / "fit-1"))
    assert report.environment["backend"] == "jax"
    assert report.environment["tensorflow"] is None
    assert sum(e.steps for e in report.epochs) == 4


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_fits_in_a_loop_and_sys_exit_main_keep_their_exit_code(
    tmp_path, backend
):
    # Two fits from a function called in a loop, on a tf.data pipeline
    # with steps_per_epoch; the script ends with sys.exit(main()) -> 3.
    env = dict(os.environ, KERAS_BACKEND=backend)
    done = keras_xla_run(
        "--log-dir", str(tmp_path), "--verbose", "0", "--no-baseline",
        script("main_exit.py"), "3", env=env,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "steps 16"
    for n in (1, 2):
        where = tmp_path / "main_exit" / f"fit-{n}"
        report = XLAReport.load(str(where))
        assert report.environment["backend"] == backend
        assert [e.steps for e in report.epochs] == [4, 4]
        assert f"keras-xla run: fit-{n} ({where}): " in done.stderr


def test_help_works_for_every_command():
    for argv in (["--help"], *([c, "--help"] for c in cli.COMMANDS)):
        done = subprocess.run(
            [sys.executable, "-m", "keras_xla", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (argv, done.stderr[-2000:])
        assert done.stdout.startswith("usage: keras-xla"), argv
        assert "Traceback" not in done.stderr
    # The tuner's flags and their help, `%` included, in `run --help`.
    assert "--max-recompilations VALUE" in done.stdout
    assert "5% of a longer first epoch" in done.stdout


def test_steps_end_each_fit_and_the_verdicts_follow_the_output(
    tmp_path, capsys
):
    code = cli.main(
        [
            "run", "--log-dir", str(tmp_path), "--steps", "5",
            "--verbose", "0", "--no-baseline",
            script("fit_twice_tfdata.py"),
        ]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    # Each fit stopped cleanly after 5 of its 16 steps.
    assert "steps 10" in captured.out
    for n in (1, 2):
        report = XLAReport.load(str(tmp_path / "fit_twice_tfdata" / f"fit-{n}"))
        assert sum(e.steps for e in report.epochs) == 5
        assert report.baseline is None or report.baseline.steps == 0
        assert f"keras-xla run: fit-{n} (" in captured.err
    # Keras's Model.fit is the plain one again.
    import keras

    assert keras.Model.fit.__name__ == "fit"


def test_a_script_that_raises_prints_its_own_traceback(tmp_path):
    done = keras_xla_run(
        "--log-dir", str(tmp_path), "--verbose", "0", script("raises.py")
    )
    assert done.returncode == 1
    err = done.stderr
    tail = err[err.index("Traceback (most recent call last):") :]
    # Python's traceback, from the script's frame: no frame of keras_xla
    # or runpy above it.
    first_frame = tail.splitlines()[1]
    assert first_frame.strip().startswith(f'File "{script("raises.py")}"')
    assert "runpy" not in tail and "script.py" not in tail
    assert "RuntimeError: the script's own error" in tail
    # The fit that ran before the error has its report and its line.
    assert XLAReport.load(str(tmp_path / "raises" / "fit-1")).epochs
    assert "keras-xla run: fit-1 (" in err


def test_bad_input_gets_one_line_and_no_traceback(tmp_path, capsys):
    cases = [
        (["run", str(tmp_path / "missing.py")], "no such script"),
        (["run"], "no script"),
        (
            ["run", "--jit-compile", "maybe", script("no_fit.py")],
            "--jit-compile: Unsupported value `XLATuner(jit_compile='maybe')`",
        ),
        (
            ["run", "--compare", "backend=torch", script("no_fit.py")],
            "--compare backend=torch: backend takes tensorflow, jax",
        ),
        (["run", "--steps", "0", script("no_fit.py")], "--steps 0"),
    ]
    for argv, line in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert line in err and "Traceback" not in err, (argv, err)
    # A script without fit: its output, then the line, and its exit code.
    assert (
        cli.main(["run", "--log-dir", str(tmp_path), script("no_fit.py")]) == 0
    )
    captured = capsys.readouterr()
    assert captured.out == "nothing to train\n"
    assert "no fit() ran in" in captured.err


def test_a_module_runs_with_the_working_directory_first(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(SCRIPTS)
    log_dir = str(tmp_path)
    argv = ["run", "--log-dir", log_dir, "--steps", "2", "--verbose", "0"]
    assert cli.main([*argv, "-m", "fit_twice_tfdata"]) == 0
    assert "steps 4" in capsys.readouterr().out
    assert os.path.isdir(tmp_path / "fit_twice_tfdata" / "fit-2")
    # A backend that is not installed: one line, before the script runs.
    monkeypatch.setenv("KERAS_BACKEND", "nonexistent-backend")
    monkeypatch.setitem(
        run_command.BACKEND_PACKAGES,
        "nonexistent-backend",
        "no_such_package_here",
    )
    assert cli.main([*argv, "fit_numpy.py"]) == 2
    err = capsys.readouterr().err
    assert "KERAS_BACKEND=nonexistent-backend: no_such_package_here is " in err


def test_the_tuners_flags_come_from_its_signature():
    parser = run_command.build_parser()
    options = {o for a in parser._actions for o in a.option_strings}
    for name in tuner_flags.tuner_parameters():
        assert tuner_flags.flag(name) in options
    # True/False arguments get --x and --no-x; the others a value.
    assert {"--baseline", "--no-baseline", "--jit-compile"} <= options
    assert "--no-jit-compile" not in options
    helps = tuner_flags.tuner_help()
    assert helps["max_recompilations"].startswith("The recompilation guard")
    ours, theirs = run_command.split(
        ["--jit-compile", "auto", "--no-baseline", "s.py", "--steps", "3"]
    )
    # The script's own flags stay the script's.
    assert ours == ["--jit-compile", "auto", "--no-baseline"]
    assert theirs == ["s.py", "--steps", "3"]
    # `--` ends the command's options, as for python (after --compare's
    # values, say).
    assert run_command.split(
        ["--compare", "jit=on,off", "--", "s.py", "-v"]
    ) == (["--compare", "jit=on,off"], ["s.py", "-v"])
    # XLATuner's signature, read from its source without importing it
    # (which would import Keras): the same as the class's own.
    from keras_xla.tuner import XLATuner

    real = inspect.signature(XLATuner.__init__).parameters
    read = tuner_flags.tuner_parameters()
    assert list(read) == [n for n in real if n not in ("self", "log_dir")]
    for name, p in read.items():
        assert p.default == real[name].default, name
    args = parser.parse_args(ours)
    assert tuner_flags.tuner_arguments(args) == {
        "jit_compile": "auto",
        "baseline": False,
    }
    assert [tuner_flags.value(v) for v in ("none", "off", "8", "1,5")] == [
        None,
        False,
        8,
        (1, 5),
    ]


def row(config, seconds, steps=32, step_ms=1.0, **more):
    return {
        "configuration": config.label,
        "default": config.default,
        "ok": True,
        "rounds": 1,
        "seconds": seconds,
        "seconds_range": [seconds, seconds],
        "steps": steps,
        "step_ms": step_ms,
        "compile_seconds": more.pop("compile_seconds", 0.0),
        "backend_seen": config.backend or "tensorflow",
        "xla": config.jit != "off",
        "codes": more.pop("codes", []),
        "dispatch_ms_median": more.pop("dispatch_ms", None),
        "input_ms_median": None,
        **more,
    }


def test_the_answer_names_the_fastest_and_why():
    default = run_compare.Configuration()
    jax_on = run_compare.Configuration("jax", "on")
    tf_off = run_compare.Configuration("tensorflow", "off")
    rows = [
        row(default, 3.0, step_ms=0.9, codes=["dispatch-bound-steps"],
            dispatch_ms=0.8, xla=False),
        row(jax_on, 1.0, step_ms=0.3, compile_seconds=0.2),
        row(tf_off, 2.0, step_ms=0.9),
    ]  # fmt: skip
    rows[0]["xla"] = False
    text = run_compare.answer(rows)
    assert text.startswith(
        "Fastest here for 32 steps: JAX with XLA, 1.00 s, 3.00x faster than "
        "the script's default (TensorFlow without XLA, 3.00 s)."
    )
    assert "dispatch-bound: launching a step takes 0.80 ms of its 0.90" in text
    assert "runs a step in 0.30 ms against 0.90 ms" in text
    # One round settles a clear lead; a close one asks for another.
    assert run_compare.settled(rows)
    rows[2]["seconds"] = 1.05
    assert not run_compare.settled(rows)
    # After two rounds, ranges that do not overlap settle it.
    rows[1].update(rounds=2, seconds_range=[0.9, 1.0])
    rows[2].update(rounds=2, seconds_range=[1.01, 1.1])
    assert run_compare.settled(rows)
    assert run_compare.configurations(
        run_compare.parse_axes(["backend=tensorflow,jax", "jit=on,off"])
    ) == [
        default,
        run_compare.Configuration("tensorflow", "on"),
        tf_off,
        jax_on,
        run_compare.Configuration("jax", "off"),
    ]


def test_a_rows_step_range_spans_its_rounds():
    def fit(step_ms, low, high):
        return {
            "seconds": 1.0, "steps": 32, "compilations": 1,
            "compile_seconds": 0.5, "step_ms": step_ms,
            "step_ms_range": [low, high], "log_dir": "",
            "dispatch_ms_median": None, "input_ms_median": None,
            "backend": "tensorflow", "xla": True,
            "codes": [], "headline": "",
        }  # fmt: skip

    rounds = [
        {"code": 0, "fits": [fit(6.0, 5.9, 6.2)]},
        {"code": 0, "fits": [fit(7.1, 7.0, 7.4)]},
    ]
    out = run_compare.row(run_compare.Configuration("tensorflow"), rounds)
    # The median of the rounds' medians, inside the range of them all
    # (the last round's alone, 7.0-7.4, would leave it out).
    assert out["step_ms"] == pytest.approx(6.55)
    assert out["step_ms_range"] == [5.9, 7.4]


def tuner_report(where, steps, compile_seconds):
    """A fit's report with XLA on, as the tuner writes it: one epoch of
    `steps` steps that compiled for `compile_seconds`, no baseline."""
    from keras_xla.core.report import EpochStats, JitInfo

    report = XLAReport(jit=JitInfo(True, True, "XLA is on."))
    report.epochs.append(
        EpochStats(0, steps, 1, compile_seconds, 0, {"median": 2.0}, 1.0)
    )
    where.mkdir()
    report.write(str(where))
    return str(where)


def test_each_xla_rows_verdict_is_against_the_tables_no_xla_row(tmp_path):
    default = run_compare.Configuration()
    tf_on = run_compare.Configuration("tensorflow", "on")
    tf_off = run_compare.Configuration("tensorflow", "off")
    jax_on = run_compare.Configuration("jax", "on")
    unknown = "whether it paid off is unknown: the baseline window is off"
    rows = [
        row(default, 2.0, step_ms=3.0, headline="XLA is off."),
        row(tf_on, 2.5, step_ms=2.0, compile_seconds=1.0, headline=unknown),
        row(tf_off, 2.0, step_ms=3.0, headline="XLA is off."),
        row(jax_on, 1.0, step_ms=1.0, compile_seconds=0.5, headline=unknown),
    ]
    rows[0]["xla"] = False
    rows[1]["report_dir"] = tuner_report(tmp_path / "tf", 32, 1.0)
    rows[3]["report_dir"] = tuner_report(tmp_path / "jax", 32, 0.5)
    run_compare.against_no_xla(rows)
    # TensorFlow with XLA against TensorFlow without it, in the table:
    # 1 ms a step saved, 1.0 s of compiling back after 1,000 steps.
    assert rows[1]["headline"].startswith(
        "XLA made each step 1.50x faster (3.00 -> 2.00 ms) but compiling "
        "cost 1.0 s; it pays back after 1,000 steps and this run had 32, "
        "so it did not pay off yet."
    )
    assert rows[1]["headline"].endswith(
        "(baseline: this table's TensorFlow without XLA row)"
    )
    assert rows[1]["tuner_headline"] == unknown
    # No JAX row without XLA: the tuner's own verdict stays.
    assert rows[3]["headline"] == unknown and "tuner_headline" not in rows[3]
    # The no-XLA rows keep theirs; the report's folder is not a column.
    assert rows[0]["headline"] == rows[2]["headline"] == "XLA is off."
    assert not any("report_dir" in r for r in rows)
    # Enough steps: it paid off; a slower XLA step: it did not.
    rows[1].update(headline=unknown)
    rows[1]["report_dir"] = tuner_report(tmp_path / "long", 1000, 1.0)
    run_compare.against_no_xla(rows)
    assert "this run had 1,000, so it paid off." in rows[1]["headline"]
    rows[1].update(headline=unknown, step_ms=3.5)
    rows[1]["report_dir"] = str(tmp_path / "tf")
    run_compare.against_no_xla(rows)
    assert rows[1]["headline"].startswith(
        "XLA made each step slower (3.00 -> 3.50 ms, 0.86x) and compiling "
        "cost 1.0 s: it did not pay off."
    )


@pytest.mark.filterwarnings("ignore")
def test_compare_makes_a_row_per_configuration_and_says_why_one_cannot(
    tmp_path, capsys
):
    pytest.importorskip("jax")
    code = cli.main(
        [
            "run", "--log-dir", str(tmp_path), "--steps", "24",
            "--verbose", "0", "--json", "--rounds", "1",
            "--compare", "backend=tensorflow,jax", "jit=on",
            script("tf_train_step.py"),
        ]
    )  # fmt: skip
    assert code == 0
    comparison = json.loads(capsys.readouterr().out)
    rows = {r["configuration"]: r for r in comparison["rows"]}
    # The default (Keras's "auto": no XLA on TensorFlow's CPU) is none
    # of the others: a row of its own, named by what it ran as.
    default = "the script's default (TensorFlow without XLA)"
    assert list(rows) == [default, "TensorFlow with XLA", "JAX with XLA"]
    jax_row = rows["JAX with XLA"]
    # Its tf.GradientTape train step cannot run on JAX: the row says why.
    assert not jax_row["ok"] and "train_step" in jax_row["why"]
    for name in (default, "TensorFlow with XLA"):
        assert rows[name]["ok"] and rows[name]["steps"] == 24
        assert rows[name]["backend_seen"] == "tensorflow"
    assert rows["TensorFlow with XLA"]["xla"] is True
    # The answer names the configuration that was fastest in the table.
    fastest = min(
        (r for r in rows.values() if r["ok"]), key=lambda r: r["seconds"]
    )
    answer = comparison["answer"]
    slowest = max(
        (r for r in rows.values() if r["ok"]), key=lambda r: r["seconds"]
    )
    if fastest["default"] or not run_compare.separated(fastest, slowest):
        # The default leads, or is indistinguishable from the leader.
        assert answer.startswith("The script's default (TensorFlow without XLA")
    else:
        assert answer.startswith(
            f"Fastest here for 24 steps: TensorFlow with XLA, "
            f"{fastest['seconds']:.2f} s"
        )
    # Each configuration's runs are TensorBoard runs under the log dir,
    # beside the comparison.
    saved = json.loads((tmp_path / "xla_compare.json").read_text())
    assert saved["answer"] == answer
    assert (tmp_path / "backend-tensorflow-jit-on" / "tf_train_step").is_dir()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "backend, default", [("tensorflow", "without XLA"), ("jax", "with XLA")]
)
def test_compare_counts_fits_whatever_the_exit_code_and_folds_the_default(
    tmp_path, capsys, monkeypatch, backend, default
):
    monkeypatch.setenv("KERAS_BACKEND", backend)
    monkeypatch.setattr(run_compare, "MAX_ROUNDS", 1)
    code = cli.main(
        [
            "run", "--log-dir", str(tmp_path), "--steps", "4",
            "--verbose", "0", "--json", "--rounds", "1",
            "--compare", "jit=on,off", script("main_exit.py"), "3",
        ]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    comparison = json.loads(captured.out)
    # Keras's "auto" default is XLA on JAX, no XLA on TensorFlow's CPU:
    # the default's run is that row's, never a row against itself.
    assert f"the script's default is {default}" in captured.err
    rows = {r["configuration"]: r for r in comparison["rows"]}
    other = "with XLA" if default == "without XLA" else "without XLA"
    assert set(rows) == {f"{default} (the script's default)", other}
    for r in rows.values():
        # The script exited 3 after training: its fits count.
        assert r["ok"] and r["exit_codes"] == [3], r
        assert (r["rounds"], r["fits"], r["steps"]) == (1, 2, 8)
        assert r["backend_seen"] == backend
    assert rows[other]["default"] is False


def test_a_row_says_why_no_fit_completed():
    config = run_compare.Configuration("jax", "on")
    fit = {"seconds": None, "steps": 3}  # it raised
    cases = [
        ({"code": 0, "fits": []}, "no fit() ran"),
        (
            {"code": 3, "fits": [], "error": None,
             "last_lines": ["loading data", "no data found"]},
            "exit code 3: loading data / no data found",
        ),
        (
            {"code": 1, "fits": [fit], "error": "ValueError: bad shape",
             "last_lines": ["ValueError: bad shape"]},
            "exit code 1: ValueError: bad shape",
        ),
    ]  # fmt: skip
    for result, why in cases:
        out = run_compare.row(config, [result])
        assert (out["ok"], out["why"], out["exit_codes"]) == (
            False,
            why,
            [result["code"]],
        )
        # A failure is never shown as a verdict.
        assert "headline" not in out


def test_rows_that_do_not_separate_are_indistinguishable():
    default = run_compare.Configuration()
    jax_on = run_compare.Configuration("jax", "on")
    jax_off = run_compare.Configuration("jax", "off")
    rows = [
        row(default, 3.0, step_ms=0.9, xla=False),
        row(jax_on, 1.0, step_ms=0.3, compile_seconds=0.2),
        row(jax_off, 1.05, step_ms=0.31),
    ]
    rows[0]["xla"] = rows[2]["xla"] = False
    text = run_compare.answer(rows)
    assert text.startswith(
        "Fastest here for 32 steps, indistinguishable from each other: "
        "JAX with XLA (1.00 s) and JAX without XLA (1.05 s); JAX with XLA "
        "is 3.00x faster than the script's default (TensorFlow without "
        "XLA, 3.00 s)."
    )
    assert not run_compare.settled(rows)
    # The default within the leader's noise: no lead is named.
    rows[0].update(seconds=1.02, seconds_range=[1.02, 1.02])
    assert run_compare.answer(rows) == (
        "The script's default (TensorFlow without XLA, 1.02 s) is as fast "
        "as any here for 32 steps: JAX with XLA (1.00 s) and JAX without "
        "XLA (1.05 s) are indistinguishable from it (their times overlap)."
    )
    # Slower steps, no less compiling: the gap is outside the steps.
    rows[0].update(seconds=3.0, seconds_range=[3.0, 3.0], step_ms=0.2)
    rows[2].update(seconds=2.0, seconds_range=[2.0, 2.0])
    assert run_compare.answer(rows).endswith(
        "Its steps are not faster (0.30 ms against 0.20 ms) and it "
        "compiled no less: the difference lies outside the timed steps "
        "(start-up, tracing, evaluation)."
    )


def test_the_default_folds_into_the_row_it_ran_as():
    configs = run_compare.configurations(
        run_compare.parse_axes(["backend=tensorflow,jax", "jit=on,off"])
    )

    def ran(backend, xla):
        fit = {"seconds": 1.0, "steps": 8, "backend": backend, "xla": xla}
        return {"code": 0, "fits": [fit]}

    twin = run_compare.twin
    assert twin(configs, ran("jax", True)) == configs[3]  # JAX with XLA
    assert twin(configs, ran("tensorflow", False)) == configs[2]
    # Axes without that backend: the default stays a row of its own.
    only_jax = run_compare.configurations({"backend": ("jax",)})
    assert twin(only_jax, ran("tensorflow", False)) is None
    # XLA "auto" is a trial, never the default's equal.
    auto = run_compare.configurations({"jit": ("auto",)})
    assert twin(auto, ran("jax", True)) is None
    assert twin(configs, {"code": 1, "fits": []}) is None


def test_the_tab_shows_a_comparison_with_each_rows_run():
    from keras_xla.dashboard import views

    comparison = {
        "script": "train.py",
        "answer": "Fastest here for 32 steps: JAX with XLA, 1.00 s, ...",
        "rows": [
            {"configuration": "the script's default", "ok": True,
             "runs": ["default/train/fit-1/train"], "seconds": 3.0},
            {"configuration": "JAX with XLA", "ok": False,
             "why": "TypeError: train_step() takes 2 positional arguments",
             "runs": []},
        ],
    }  # fmt: skip
    entry = views.comparison_entry("sweep/comparison", json.dumps(comparison))
    assert entry["answer"] == comparison["answer"]
    # Each row's runs as TensorBoard names them, beside the comparison's.
    assert [r["runs"] for r in entry["rows"]] == [
        ["sweep/default/train/fit-1/train"],
        [],
    ]
    assert entry["rows"][1]["why"].startswith("TypeError")
    assert views.comparison_entry("comparison", "{not json") is None

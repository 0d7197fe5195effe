"""The layers: a core without TensorFlow, an owner per fit that nothing
keeps alive, and the trial runner driven without a fit."""

import ast
import gc
import os
import re
import subprocess
import sys
import weakref

import keras
from conftest import conv_model, regression_data

from keras_xla import XLATuner
from keras_xla.auto import runner as trial_runner
from keras_xla.auto.model_state import ModelState
from keras_xla.core.report import Decision

CORE = (
    "accounting",
    "batch_paths",
    "cache_directory",
    "cache_home",
    "compare",
    "diagnosis_text",
    "files",
    "findings",
    "json_files",
    "lints",
    "render",
    "report",
    "sections",
    "signatures",
    "step_timer",
    "summaries",
    "timing",
    "verdict",
)
# The trial's policy and measurements are pure too.
AUTO = ("policy", "trial")


def test_core_imports_without_tensorflow_or_keras():
    imports = "; ".join(
        [f"import keras_xla.core.{name}" for name in CORE]
        + [f"import keras_xla.auto.{name}" for name in AUTO]
    )
    code = (
        f"import sys; {imports}; "
        "print(sorted(m for m in ('tensorflow', 'keras', 'jax') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


PACKAGE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "keras_xla")
# Top-level modules that are TensorFlow's by nature: tf.data's helpers.
TENSORFLOW_AT_TOP = {"data.py"}


def modules(folder=""):
    """`(relative path, source)` of the package's modules under `folder`."""
    root = os.path.join(PACKAGE, folder)
    for base, _, names in os.walk(root):
        for file in sorted(names):
            if file.endswith(".py"):
                path = os.path.join(base, file)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, PACKAGE), f.read()


def is_package_module(name):
    parts = name.split(".")[1:]
    path = os.path.join(PACKAGE, *parts)
    return os.path.isdir(path) or os.path.isfile(path + ".py")


def imported(source):
    """Every module a source imports, at any depth (lazy imports too):
    `from package import module` names the module."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                inside = name.startswith("keras_xla.")
                found.add(
                    name if inside and is_package_module(name) else node.module
                )
    return found


def test_the_backend_packages_do_not_import_each_other():
    for folder, other in (("tf_backend", "jax"), ("jax_backend", "tf")):
        for path, source in modules(folder):
            reached = {
                m
                for m in imported(source)
                if m.startswith(f"keras_xla.{other}_backend")
            }
            assert not reached, (path, reached)


def test_only_the_dispatch_module_branches_on_the_backend():
    branch = re.compile(
        r"""(==|!=)\s*["'](jax|tensorflow)["']|["'](jax|tensorflow)["']"""
        r"""\s*(==|!=)|backend\(\)\s*(==|!=|in\b)"""
    )
    for path, source in modules():
        if path == "backends.py":
            continue
        assert not branch.search(source), path


def test_the_neutral_layer_reaches_a_backend_through_the_dispatch_only():
    # Top-level modules, auto/ and the dashboard: a backend's parts come
    # from `backends.py` (the public names' table in `__init__` names
    # their modules as strings).
    for path, source in modules():
        if path.startswith(("tf_backend", "jax_backend")):
            continue
        if path in ("backends.py", "__init__.py"):
            continue
        reached = {
            m
            for m in imported(source)
            if m.startswith(("keras_xla.tf_backend", "keras_xla.jax_backend"))
        }
        assert not reached, (path, reached)


def test_top_level_modules_import_no_tensorflow():
    for path, source in modules():
        if os.sep in path or path in TENSORFLOW_AT_TOP:
            continue
        assert not any(
            m == "tensorflow" or m.startswith("tensorflow.")
            for m in imported(source)
        ), path


def test_core_imports_nothing_above_it():
    for path, source in modules("core"):
        above = {
            m
            for m in imported(source)
            if m.startswith("keras_xla.") and not m.startswith("keras_xla.core")
        }
        assert not above, (path, above)


def test_the_model_does_not_keep_the_tuner_alive():
    x, y = regression_data(32)
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[tuner])
    assert tuner.report.total_compilations == 1
    run = weakref.ref(tuner._run)
    tuner = weakref.ref(tuner)
    gc.collect()
    assert tuner() is None and run() is None
    # The bare (probed, unguarded) step function is back on the model.
    assert model.train_function.__name__ != "guarded"


class StubModel:
    """What the trial runner reads of a model, without a model."""

    def __init__(self, jit_compile=False):
        self.jit_compile = jit_compile
        self.dtype_policy = keras.DTypePolicy("float32")
        self.optimizer = None

    def _flatten_layers(self, include_self=False):
        return []

    def _resolve_auto_jit_compile(self):
        return False


def request(**kw):
    base = dict(
        jit="auto",
        precision=None,
        budget=0.25,
        xla_possible=True,
        epoch_steps=400,
        steps_per_call=1,
        probed=True,
    )
    return trial_runner.Request(**{**base, **kw})


def test_trial_runner_settles_without_a_fit():
    model = StubModel()
    original = ModelState(model)
    one = trial_runner.plan(model, request(jit=True), original, None)
    assert isinstance(one, trial_runner.Decided)
    assert (one.decision.status, one.decision.winner) == (
        "single-candidate",
        "xla/float32",
    )
    assert model.jit_compile is True
    unknown = trial_runner.plan(
        model, request(epoch_steps=None), original, None
    )
    assert unknown.decision.status == "skipped"
    assert "length is unknown" in unknown.skipped[0]
    assert model.jit_compile is False  # as compiled: original setting
    # One worker of a job: no clock of its own decides; the model trains
    # as compiled, on every worker alike.
    job = trial_runner.plan(model, request(workers=2), original, None)
    assert job.decision.status == "skipped"
    assert "one of a job's 2 workers" in job.skipped[0]
    assert model.jit_compile is False
    kept = ModelState(model)
    previous = (model, kept, Decision("decided", "no_xla/float32", "r"))
    again = trial_runner.plan(model, request(), original, previous)
    assert again.decision.status == "reused"
    assert again.jit_reason() == "the trial chose no_xla/float32 (r)"


def test_trial_runner_switches_and_decides_on_records(monkeypatch):
    import dataclasses

    from keras_xla.auto import policy
    from keras_xla.core.timing import StepRecord

    # Rotation, not dropping: every window runs.
    unbounded = dataclasses.replace(policy.TUNABLES, drop_factor=float("inf"))
    monkeypatch.setattr(policy, "TUNABLES", unbounded)
    model = StubModel()
    runner = trial_runner.plan(
        model, request(budget=18), ModelState(model), None
    )
    assert isinstance(runner, trial_runner.TrialRunner)
    records, seen = [], []
    step = 0
    while True:
        if runner.at_boundary() and runner.close_window(records):
            break
        if runner.advance(model):
            seen.append(model.jit_compile)
        # XLA steps take 1 ms, the others 2 ms.
        seconds = 0.001 if model.jit_compile else 0.002
        records.append(StepRecord("train", step, seconds))
        step += 1
    settlement = runner.finish(model, records)
    assert step == 18
    # Windows no_xla, xla | xla, no_xla | no_xla, xla: the order rotates,
    # and a window that continues the configuration switches nothing.
    assert seen == [True, False, True]
    assert settlement.decision.winner == "xla/float32"
    assert model.jit_compile is True
    assert settlement.decision.speedup_vs_default == 2.0


def test_the_baseline_windows_start_after_a_warm_up_where_the_epoch_has_room():
    from keras_xla.core.timing import StepRecord

    def drive(epoch_steps):
        """The baseline on a stub model: XLA steps take 1 ms, no-XLA 2 ms
        (the warm-up's XLA steps 10 ms: too slow to be timed)."""
        model = StubModel(jit_compile=True)
        runner = trial_runner.plan_baseline(
            model, request(jit=True, epoch_steps=epoch_steps)
        )
        assert isinstance(runner, trial_runner.TrialRunner)
        warmup, records = runner.warmup, []
        while True:
            step = len(records)
            if runner.before_call(model, lambda: records) is (
                trial_runner.Next.DONE
            ):
                break
            fast = 0.01 if step < warmup else 0.001
            seconds = fast if model.jit_compile else 0.002
            records.append(StepRecord("train", step, seconds))
        return warmup, runner.finish(model, records).baseline

    # 400 steps: 48 steps of windows after 20 of warm-up.
    warmup, baseline = drive(400)
    assert warmup == 20
    assert baseline.span == [[0, 20], [0, 67]]
    assert (baseline.xla_step_ms, baseline.no_xla_step_ms) == (1.0, 2.0)
    # 13 steps hold 12 of windows and the last call: no warm-up.
    warmup, baseline = drive(13)
    assert warmup == 0 and baseline.span == [[0, 0], [0, 11]]

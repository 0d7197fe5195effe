"""Every train step that stands out is labelled by what explains it: a
compilation, a wait for its batch, a warm-up call, or nothing."""

import time
import warnings

import keras
import numpy as np
import pytest

from keras_xla import XLATuner
from keras_xla.core import spikes
from keras_xla.core.timing import StepRecord


def record(step, ms, **extra):
    return StepRecord("train", step, ms / 1000.0, **extra)


def test_planted_calls_are_labelled_by_what_explains_them():
    median = 0.010
    records = [
        record(0, 500.0, new=[(0, 0)]),  # compiled
        record(1, 10.0),
        record(2, 50.0, input_seconds=0.035),  # waited 35 of 40 ms excess
        record(3, 11.0),
        record(4, 40.0, warmup=True),  # a first call, or a no-XLA one
        record(5, 60.0, input_seconds=0.001),  # a pause nothing explains
        record(6, 19.0),  # under twice the median
        record(7, 10.0),
    ]
    found = spikes.label(records, median)
    assert [(s["step"], s["kind"]) for s in found] == [
        (0, spikes.COMPILE),
        (2, spikes.INPUT),
        (4, spikes.WARMUP),
        (5, spikes.UNEXPLAINED),
    ]
    assert found[3] == {
        "step": 5,
        "ms": 60.0,
        "seconds": 0.05,
        "kind": spikes.UNEXPLAINED,
    }
    assert spikes.unexplained_seconds(found) == 0.05
    # A tiny step's jitter: twice the median but under MIN_SECONDS more.
    assert spikes.label([record(0, 0.5)], 0.0002) == []
    assert spikes.label(records, None) == []


def tuned_fit(model, x, y, callback):
    """One epoch in batches of 16, in order, under a tuner (no baseline,
    no HLO analysis) with `callback` after it; returns the tuner."""
    tuner = XLATuner(verbose=0, baseline=False, analyze_hlo=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            x,
            y,
            batch_size=16,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[tuner, callback],
        )
    return tuner


class PauseAt(keras.callbacks.Callback):
    """The host pauses 80 ms after one train batch (a callback's work)."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            time.sleep(0.08)


def test_a_host_pause_is_unexplained_and_a_new_shape_a_compilation():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    x = np.random.rand(16 * 12 + 8, 16).astype("float32")
    y = np.random.rand(16 * 12 + 8, 1).astype("float32")
    tuner = tuned_fit(model, x, y, PauseAt(6))
    epoch = tuner.report.epochs[0]
    kinds = {s["step"]: s["kind"] for s in epoch.spikes}
    # The first call and the short last batch (step 12) compiled; the
    # pause after step 6 is its step's, and nothing explains it.
    assert kinds[0] == spikes.COMPILE
    assert kinds[12] == spikes.COMPILE
    assert kinds[6] == spikes.UNEXPLAINED
    assert epoch.unexplained_seconds >= 0.07
    # Nothing else is called a compilation (the compile count agrees).
    compiled = [s for s, k in kinds.items() if k == spikes.COMPILE]
    assert len(compiled) == epoch.compilations == 2
    summary = tuner.report.summary()
    assert "Steps that stood out: 2 compile" in summary
    assert " unexplained (" in summary


class CompileAt(keras.callbacks.Callback):
    """A callback that compiles a function of its own with XLA before one
    train batch: a compilation the step's signatures never see."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.batch:
            import tensorflow as tf

            fn = tf.function(lambda v: tf.reduce_sum(v * v), jit_compile=True)
            fn(tf.ones((37, 5)))


def test_another_functions_compilation_is_not_a_host_pause():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=True)
    x = np.random.rand(16 * 16, 16).astype("float32")
    y = np.random.rand(16 * 16, 1).astype("float32")
    tuner = tuned_fit(model, x, y, CompileAt(9))
    epoch = tuner.report.epochs[0]
    kinds = {s["step"]: s["kind"] for s in epoch.spikes}
    # The compile ledger recorded a compilation during call 9 that is not
    # the step's: its spike is a compilation, not a pause.
    assert kinds[9] == spikes.COMPILE
    # Its seconds are not counted as unexplained (a busy machine may
    # still pause other steps: those alone make the figure).
    others = [s for s in epoch.spikes if s["kind"] == spikes.UNEXPLAINED]
    assert all(s["step"] != 9 for s in others)
    assert epoch.unexplained_seconds == pytest.approx(
        sum(s["seconds"] for s in others), abs=1e-4
    )
    assert epoch.compilations == 1  # the step's own count is untouched


def test_the_tab_rings_the_slow_steps_no_compilation_explains():
    from keras_xla.core.report import EpochStats, XLAReport
    from keras_xla.dashboard import views

    report = XLAReport()
    for epoch, found in enumerate(
        (
            [{"step": 0, "ms": 90.0, "seconds": 0.08, "kind": "compile"}],
            [
                {"step": 2, "ms": 40.0, "seconds": 0.03, "kind": "input"},
                {"step": 4, "ms": 70.0, "seconds": 0.06, "kind": "unexplained"},
            ],
        )
    ):
        stats = EpochStats(epoch, 10, 0, 0.0, 0, {"median": 10.0}, None)
        stats.spikes = found
        report.epochs.append(stats)
    # The compilation has its marker; the others are at their global
    # train steps (the first epoch ran 10).
    assert views.slow_steps(report) == [
        {"global_step": 12, "kind": "input", "ms": 40.0, "seconds": 0.03},
        {"global_step": 14, "kind": "unexplained", "ms": 70.0, "seconds": 0.06},
    ]

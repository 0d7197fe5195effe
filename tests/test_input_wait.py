"""The wait for each batch on TensorFlow: stamped around Keras's get-next,
outside the compiled step, and handed to the step's probe row."""

import time

import keras
import numpy as np
import tensorflow as tf
from conftest import quiet_fit

from keras_xla import XLATuner
from keras_xla.core import spikes
from keras_xla.core.timing import StepRecord, attach_waits

SLEEP = 0.04  # seconds each slow batch takes to make
BATCH = 16


def model(steps_per_execution=1):
    keras.utils.set_random_seed(0)
    m = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    m.compile(
        "sgd",
        "mse",
        jit_compile=True,
        steps_per_execution=steps_per_execution,
    )
    return m


def arrays(batches):
    rng = np.random.default_rng(0)
    x = rng.random((BATCH * batches, 4), dtype=np.float32)
    return x, rng.random((BATCH * batches, 1), dtype=np.float32)


def unprefetched(dataset):
    """`dataset` as written: tf.data adds no prefetch of its own, so each
    batch is made while the step waits for it."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def slow_dataset(batches, slow=lambda i: True, slept=None):
    """Batches of an in-memory dataset whose `i`-th batch takes `SLEEP`
    seconds to make where `slow(i)` (each sleep's real seconds appended
    to `slept`)."""

    def make(i, x):
        if slow(int(i)):
            start = time.perf_counter()
            time.sleep(SLEEP)
            if slept is not None:
                slept.append(time.perf_counter() - start)
        return x

    def sleepy(i, pair):
        x, y = pair
        x = tf.numpy_function(make, [i, x], tf.float32)
        return tf.ensure_shape(x, [None, 4]), y

    x, y = arrays(batches)
    batched = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    return unprefetched(batched.enumerate().map(sleepy))


def fit(m, data, tuner, **kwargs):
    quiet_fit(m, data, tuner=tuner, **kwargs)
    return tuner.report


def test_a_slow_pipeline_is_input_bound_and_the_verdict_says_so_first(
    tmp_path,
):
    import statistics

    slept = []
    tuner = XLATuner(verbose=0, log_dir=str(tmp_path))
    report = fit(model(), slow_dataset(24, slept=slept), tuner, epochs=2)
    sleep_ms = statistics.median(slept) * 1000.0
    for epoch in report.epochs:
        times = epoch.step_time_ms
        # Each batch took the planted sleep (and the map's own work) to
        # make, while the call waited for it; the step is a few ms.
        assert sleep_ms <= epoch.input_ms_median <= sleep_ms + 5.0
        # Its share lies between the sleep's and the bound above's, each
        # over the median step (a busy machine hands the batch over late).
        planted = sleep_ms / times["median"]
        slack = 5.0 / times["median"]
        assert planted - 0.02 <= epoch.input_share <= planted + slack
        assert epoch.input_share >= 0.7
    assert "input-bound" in report.finding_codes()
    verdict = report.verdict
    assert verdict.input_share >= 0.7
    assert verdict.headline.startswith("The input comes first: ")
    assert "input-bound" in [s["code"] for s in verdict.next_steps]
    assert "input-bound" in report.summary()


def test_a_python_generator_that_sleeps_is_input_bound(tmp_path):
    x, y = arrays(1)

    def batches():
        while True:
            time.sleep(SLEEP)
            yield x, y

    tuner = XLATuner(verbose=0, log_dir=str(tmp_path), baseline=False)
    report = fit(model(), batches(), tuner, epochs=1, steps_per_epoch=24)
    (epoch,) = report.epochs
    # Keras may fetch the next batch while a step runs: the wait is the
    # sleep less that overlap, and most of each step.
    assert 20.0 <= epoch.input_ms_median <= 50.0
    assert epoch.input_share >= 0.5
    assert "input-bound" in report.finding_codes()


def test_a_fast_pipeline_is_seen_and_not_input_bound(tmp_path):
    x, y = arrays(40)
    tuner = XLATuner(verbose=0, log_dir=str(tmp_path), baseline=False)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    report = fit(model(), data, tuner, epochs=1)
    wait_ms = report.epochs[0].input_ms_median
    assert wait_ms is not None
    assert 0.0 <= wait_ms < 1.0
    assert "input-bound" not in report.finding_codes()


def test_one_slow_batch_is_an_input_spike():
    tuner = XLATuner(verbose=0, baseline=False, analyze_hlo=False)
    # Batch 9 alone takes 40 ms to make: its call stands out, and its
    # wait explains it.
    report = fit(model(), slow_dataset(16, slow=lambda i: i == 9), tuner)
    kinds = {s["step"]: s["kind"] for s in report.epochs[0].spikes}
    assert kinds[9] == spikes.INPUT
    # The others wait only for the map's own work (a Python call each).
    assert report.epochs[0].input_ms_median < 10.0


def test_several_steps_per_call_are_not_stamped(tmp_path):
    # Keras fetches inside its loop there: the wait is not seen, and
    # nothing is guessed.
    tuner = XLATuner(verbose=0, log_dir=str(tmp_path), baseline=False)
    report = fit(model(steps_per_execution=2), slow_dataset(12), tuner)
    assert report.epochs[0].input_ms_median is None
    assert "input-bound" not in report.finding_codes()


def test_waits_go_to_their_calls_steps():
    records = [
        StepRecord("train", 0, 0.01, signatures=[("a",)]),
        StepRecord("train", 1, 0.01, signatures=[("a",), ("a",)]),
        StepRecord("train", 3, 0.01, signatures=[("a",)]),
    ]
    attach_waits(records, [0.002, 0.001, 0.003, None])
    # A call of two steps waited for both batches; a step whose wait was
    # not seen leaves its call's unknown.
    assert [r.input_seconds for r in records] == [0.002, 0.004, None]

"""Fits with XLATuner on Keras's JAX backend, in their own process.

The main test process runs Keras on TensorFlow, so the JAX tests run this
script with `KERAS_BACKEND=jax` and read the JSON it prints on its last
line. TensorFlow is made unimportable first: nothing on the JAX path may
import it (`--with-tensorflow`: a scenario that feeds Keras on JAX from
tf.data, as users do). JAX's own compile events, counted here
independently of the tuner, are the ground truth the tests compare the
report with.

Usage: python jax_run.py LOG_DIR SCENARIO [SCENARIO ...] [--cache DIR]
    [--with-tensorflow]
"""

import dataclasses
import json
import os
import re
import sys
import time
import warnings

if "--with-tensorflow" not in sys.argv:
    sys.modules["tensorflow"] = None  # the JAX path must not import it
os.environ["KERAS_BACKEND"] = "jax"
warnings.simplefilter("ignore")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_xla  # noqa: E402

EVENTS = []  # (fun_name, seconds, cache hit)
_HIT = [False]


def _on_event(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        _HIT[0] = True


def _on_duration(event, seconds, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        EVENTS.append((kwargs.get("fun_name"), seconds, _HIT[0]))
        _HIT[0] = False


jax.monitoring.register_event_listener(_on_event)
jax.monitoring.register_event_duration_secs_listener(_on_duration)


def truth(start):
    """Compilations (not hits) and hits of the step functions since
    `start`."""
    out = {"train": 0, "test": 0, "train_hits": 0, "test_hits": 0}
    seconds = {"train": 0.0, "test": 0.0}
    for name, duration, hit in EVENTS[start:]:
        for function in ("train", "test"):
            if name == f"jit({function}_step)":
                out[f"{function}_hits" if hit else function] += 1
                if not hit:
                    seconds[function] += duration
    out["seconds"] = seconds
    return out


def dense_model(features=4):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    return model


def summary(tuner, start):
    report = tuner.report
    return {
        "truth": truth(start),
        "epochs": [
            {
                "compilations": e.compilations,
                "compile_seconds": e.compile_seconds,
                "recompilations": e.recompilations,
                "by_function": e.by_function,
                "steps": e.steps,
                "median": e.step_time_ms["median"],
                "dispatch": e.dispatch_ms_median,
                "tuner": e.tuner_ms_median,
                "input": e.input_ms_median,
                "input_share": e.input_share,
                "spikes": e.spikes,
                "hits": e.compile_cache_hits,
                "misses": e.compile_cache_misses,
            }
            for e in report.epochs
        ],
        "recompilations": [
            {
                "function": r.function,
                "cause": r.cause,
                "input": r.input,
                "dim": r.dim,
                "before": r.before,
                "after": r.after,
                "seconds": r.compile_seconds,
            }
            for r in report.recompilations
        ],
        "compile_log": [
            (c.function, c.compile_seconds, c.cache) for c in report.compile_log
        ],
        "codes": sorted(set(report.finding_codes())),
        "jit": report.jit.enabled if report.jit else None,
        "baseline": report.baseline.to_dict() if report.baseline else None,
        "verdict": report.verdict.to_dict() if report.verdict else None,
        "hlo": report.hlo.to_dict() if report.hlo else None,
        "cache": (
            report.compile_cache.to_dict() if report.compile_cache else None
        ),
        "outside": report.outside_compilations,
        "environment": report.environment,
        # What the epoch lints read, to check them against core.lints.
        "lints": {
            "epochs": [dataclasses.asdict(e) for e in report.epochs],
            "params": {k: tuner.params.get(k) for k in ("steps", "epochs")},
            "spe": int(tuner.model.steps_per_execution or 1),
        },
    }


def partial(log_dir):
    """50 samples in batches of 8 (a short last batch of 2), validation
    20 in batches of 8 (last 4), two epochs; then a second fit."""
    model = dense_model()
    x = np.random.rand(50, 4).astype("float32")
    y = np.random.randint(0, 2, (50, 1))  # int64 labels: one signature
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    start = len(EVENTS)
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=2,
        verbose=0,
        validation_data=(x[:20], y[:20]),
        callbacks=[tuner],
    )
    first = summary(tuner, start)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[tuner])
    second = summary(tuner, start)
    with open(os.path.join(log_dir, "xla_report.json")) as f:
        written = json.load(f)
    return {
        "first": first,
        "second": second,
        "json_compilations": [e["compilations"] for e in written["epochs"]],
        "train_function_restored": not hasattr(
            model.train_function, "_keras_xla_tapped"
        ),
    }


class Padded(keras.utils.PyDataset):
    """Token batches padded per batch: lengths 6, 6, 6, 9, 6."""

    LENGTHS = (6, 6, 6, 9, 6)

    def __len__(self):
        return len(self.LENGTHS)

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        length = self.LENGTHS[i]
        tokens = rng.integers(1, 20, (4, length)).astype("int64")
        return tokens, rng.random((4, 1)).astype("float32")


def padded(log_dir):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(20, 4),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    tuner = keras_xla.XLATuner(log_dir=None, verbose=0, baseline=False)
    start = len(EVENTS)
    model.fit(Padded(), epochs=1, verbose=0, callbacks=[tuner])
    return summary(tuner, start)


def spe(log_dir):
    """steps_per_execution=3 over 7 batches (3 + 3 + 1; the last batch
    short)."""
    model = dense_model()
    model.compile("adam", "mse", steps_per_execution=3)
    x = np.random.rand(50, 4).astype("float32")
    y = np.random.rand(50, 1).astype("float32")
    tuner = keras_xla.XLATuner(log_dir=None, verbose=0, baseline=False)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tuner])
    return summary(tuner, start)


def baseline(log_dir):
    """64 steps an epoch: the no-XLA baseline windows, and the HLO (with
    a measured peak for the utilization)."""
    model = dense_model()
    x = np.random.rand(512, 4).astype("float32")
    y = np.random.rand(512, 1).astype("float32")
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, peak_flops="measure")
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tuner])
    out = summary(tuner, start)
    out["jit_after"] = bool(model.jit_compile)
    return out


def unknown_length(log_dir):
    """A single epoch of a generator (length unknown to Keras): the
    baseline runs in it; 90 steps hold its windows, 33 end inside the
    first no-XLA window."""

    def batches(n):
        rng = np.random.RandomState(0)
        for _ in range(n):
            x = rng.rand(8, 4).astype("float32")
            yield x, rng.rand(8, 1).astype("float32")

    out = {}
    for n in (90, 33):
        model = dense_model()
        tuner = keras_xla.XLATuner(verbose=0)
        start = len(EVENTS)
        model.fit(batches(n), epochs=1, verbose=0, callbacks=[tuner])
        result = summary(tuner, start)
        result["iterations"] = int(model.optimizer.iterations)
        result["steps_param"] = tuner.params.get("steps")
        out[str(n)] = result
    return out


# The planted step's known length: compiled by XLA, and op by op.
XLA_MS, NO_XLA_MS = 20.0, 40.0


class Sleep(keras.layers.Layer):
    """Takes a known time in the step (a host callback, which JAX runs
    before the call returns): `XLA_MS` where the step is compiled by XLA
    (its variables are traced), `NO_XLA_MS` op by op."""

    def build(self, shape):
        self.marker = self.add_weight(
            shape=(), initializer="zeros", trainable=False
        )

    def call(self, x):
        compiled = isinstance(self.marker.value, jax.core.Tracer)
        seconds = (XLA_MS if compiled else NO_XLA_MS) / 1000.0

        def sleep(value):
            time.sleep(seconds)
            return value

        held = jax.lax.stop_gradient(x)
        spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x + jax.pure_callback(sleep, spec, held) - held


def planted_model(jit=True):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), Sleep(), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse", jit_compile=jit)
    return model


class BlockingClock(keras.callbacks.Callback):
    """Each step from its batch begin until its results exist (not
    async-safe: Keras reads the step's logs on the training thread)."""

    def __init__(self):
        super().__init__()
        self.ms, self._start = [], 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.ms.append((time.perf_counter() - self._start) * 1000.0)


def planted_time(log_dir):
    """A step of known length (20 ms with XLA, 40 ms without): the
    tuner's times and verdict against separate fits timed by a blocking
    clock."""
    x = np.random.rand(8 * 40, 4).astype("float32")
    y = np.random.rand(8 * 40, 1).astype("float32")
    model = planted_model()
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tuner])
    out = summary(tuner, start)
    separate = {}
    for jit in (False, True):
        clock = BlockingClock()
        planted_model(jit).fit(x, y, batch_size=8, verbose=0, callbacks=[clock])
        separate["xla" if jit else "no_xla"] = clock.ms[1:]
    out["separate"] = separate
    return out


def convnet():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


class LoopClock(keras.callbacks.Callback):
    """Each epoch's train loop, from its first batch begin to the epoch's
    end (Keras has waited for every step's logs by then). Async-safe:
    the loop stays asynchronous."""

    async_safe = True

    def __init__(self):
        super().__init__()
        self.seconds, self._start = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self._start = None

    def on_train_batch_begin(self, batch, logs=None):
        if self._start is None:
            self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def async_time(log_dir):
    """A convnet on 28x28 images in batches of 128, whose jitted step
    JAX returns from long before its work is done: the tuner's steps
    against the loop's wall time, and a separate fit's blocking clock."""
    rng = np.random.default_rng(0)
    x = rng.random((128 * 24, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 128 * 24)
    model = convnet()
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    clock = LoopClock()
    start = len(EVENTS)
    model.fit(
        x, y, batch_size=128, epochs=2, verbose=0, callbacks=[tuner, clock]
    )
    out = summary(tuner, start)
    out["loop_seconds"] = clock.seconds
    blocking = BlockingClock()
    convnet().fit(x, y, batch_size=128, verbose=0, callbacks=[blocking])
    out["separate"] = blocking.ms[1:]
    return out


def slow_input(log_dir):
    """A Python generator that takes 20 ms to make each batch, for a
    step of 20 ms with XLA (40 ms without): the wait for the batch is
    measured apart from the dispatch, half of each XLA step."""

    def batches():
        rng = np.random.default_rng(0)
        while True:
            time.sleep(0.02)
            x = rng.random((8, 4), dtype=np.float32)
            yield x, rng.random((8, 1), dtype=np.float32)

    model = planted_model()
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0)
    start = len(EVENTS)
    model.fit(
        batches(), steps_per_epoch=40, epochs=2, verbose=0, callbacks=[tuner]
    )
    return summary(tuner, start)


def slow_tfdata(log_dir):
    """A tf.data pipeline whose map sleeps 20 ms a batch (no prefetch of
    its own), on the 20 ms planted step: half of each XLA step waits."""
    import tensorflow as tf

    def make(x):
        time.sleep(0.02)
        return x

    def sleepy(x, y):
        x = tf.numpy_function(make, [x], tf.float32)
        return tf.ensure_shape(x, [None, 4]), y

    rng = np.random.default_rng(0)
    x = rng.random((8 * 40, 4), dtype=np.float32)
    y = rng.random((8 * 40, 1), dtype=np.float32)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    data = batches.map(sleepy).with_options(options)
    model = planted_model()
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    start = len(EVENTS)
    model.fit(data, epochs=1, verbose=0, callbacks=[tuner])
    return summary(tuner, start)


class CompileAt(keras.callbacks.Callback):
    """Compiles a function of its own with XLA before one train batch."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.batch:
            import jax

            jax.jit(lambda v: (v * v).sum())(np.ones((37, 5), np.float32))


def other_compile(log_dir):
    """A callback's own compilation during train call 9: a compilation,
    not a host pause; the step's count untouched."""
    x = np.random.rand(16 * 16, 4).astype("float32")
    y = np.random.rand(16 * 16, 1).astype("float32")
    model = dense_model()
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=1,
        verbose=0,
        callbacks=[tuner, CompileAt(9)],
    )
    epoch = tuner.report.epochs[0]
    return {
        "kinds": {str(s["step"]): s["kind"] for s in epoch.spikes},
        "seconds": {str(s["step"]): s["seconds"] for s in epoch.spikes},
        "unexplained": epoch.unexplained_seconds,
        "compilations": epoch.compilations,
    }


class StopAt(keras.callbacks.Callback):
    """Raises at a train batch's end: a fit interrupted there."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            raise RuntimeError("stopped")


def baseline_edges(log_dir):
    """A baseline spanning epochs (10 steps an epoch, three epochs), and a
    fit interrupted inside the windows."""
    model = dense_model()
    x = np.random.rand(512, 4).astype("float32")
    y = np.random.rand(512, 1).astype("float32")
    spans = keras_xla.XLATuner(log_dir=None, verbose=0)
    start = len(EVENTS)
    model.fit(
        x[:80], y[:80], batch_size=8, epochs=3, verbose=0, callbacks=[spans]
    )
    out = {"spans": summary(spans, start)}
    model = dense_model()
    stopped = keras_xla.XLATuner(log_dir=None, verbose=0)
    try:
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=1,
            verbose=0,
            callbacks=[stopped, StopAt(5)],
        )
    except RuntimeError:
        pass
    out["stopped"] = summary(stopped, 0)
    out["stopped"]["jit_after"] = bool(model.jit_compile)
    out["stopped"]["untapped"] = not hasattr(
        model.train_function, "_keras_xla_tapped"
    )
    return out


def cache(log_dir, directory):
    model = dense_model()
    x = np.random.rand(50, 4).astype("float32")
    y = np.random.rand(50, 1).astype("float32")
    tuner = keras_xla.XLATuner(
        log_dir=None, verbose=0, baseline=False, compile_cache=directory
    )
    start = len(EVENTS)
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=1,
        verbose=0,
        validation_data=(x[:20], y[:20]),
        callbacks=[tuner],
    )
    return summary(tuner, start)


def data_parallel(log_dir):
    """DataParallel over two host devices: one SPMD compilation per
    shape; then a last batch that does not divide over the devices."""
    keras.distribution.set_distribution(keras.distribution.DataParallel())
    model = dense_model()
    x = np.random.rand(52, 4).astype("float32")
    y = np.random.rand(52, 1).astype("float32")
    tuner = keras_xla.XLATuner(log_dir=None, verbose=0, baseline=False)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tuner])
    out = {"even": summary(tuner, start), "devices": jax.device_count()}
    odd = keras_xla.XLATuner(log_dir=None, verbose=0, baseline=False)
    try:
        model.fit(x[:51], y[:51], batch_size=8, verbose=0, callbacks=[odd])
        out["odd_error"] = None
    except Exception as error:  # noqa: BLE001
        out["odd_error"] = type(error).__name__
    out["odd_codes"] = sorted(set(odd.report.finding_codes()))
    out["odd_findings"] = [f.fix for f in odd.report.findings]
    keras.distribution.set_distribution(None)
    return out


def settings(log_dir):
    """jit_compile="auto" (a trial of 6 steps) and
    jit_compile=False (the step runs op by op: no step compilation)."""
    model = dense_model()
    x = np.random.rand(48, 4).astype("float32")
    y = np.random.rand(48, 1).astype("float32")
    auto = keras_xla.XLATuner(verbose=0, jit_compile="auto", baseline=False)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[auto])
    out = {"auto": summary(auto, start)}
    off = keras_xla.XLATuner(verbose=0, jit_compile=False)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[off])
    out["off"] = summary(off, start)
    out["off"]["jit_after"] = bool(model.jit_compile)
    out["auto_findings"] = [
        f.message
        for f in auto.report.findings
        if f.code == "backend-unsupported"
    ]
    # A TensorFlow-only feature asked for on JAX says so, and the fit
    # trains as the model was compiled.
    tf_only = keras_xla.XLATuner(
        log_dir=os.path.join(log_dir, "tf_only"),
        verbose=0,
        baseline=False,
        profile_steps=(1, 2),
    )
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[tf_only])
    out["tf_only"] = summary(tf_only, start)
    out["tf_only"]["findings"] = [
        (f.code, f.severity, f.message) for f in tf_only.report.findings
    ]
    out["tf_only"]["policy"] = model.dtype_policy.name
    return out


def auto_trial(log_dir):
    """jit_compile="auto": the XLA on/off trial over 64 steps an epoch
    (the no-jit step is about 50 times slower on this model), kept; then
    a fit too short for the trial (one epoch of 2 steps)."""
    model = dense_model()
    x = np.random.rand(512, 4).astype("float32")
    y = np.random.rand(512, 1).astype("float32")
    tuner = keras_xla.XLATuner(
        log_dir=log_dir, verbose=0, jit_compile="auto", keep=True
    )
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tuner])
    out = {"decided": summary(tuner, start)}
    decision = tuner.report.decision
    out["decided"]["decision"] = decision.to_dict() if decision else None
    out["decided"]["jit_after"] = bool(model.jit_compile)
    out["decided"]["jit_reason"] = tuner.report.jit.reason
    model = dense_model()
    short = keras_xla.XLATuner(verbose=0, jit_compile="auto")
    start = len(EVENTS)
    model.fit(x[:16], y[:16], batch_size=8, verbose=0, callbacks=[short])
    out["short"] = summary(short, start)
    decision = short.report.decision
    out["short"]["decision"] = decision.to_dict() if decision else None
    out["short"]["jit_after"] = bool(model.jit_compile)
    out["short"]["findings"] = [
        (f.code, f.message) for f in short.report.findings
    ]
    return out


def auto_memory(log_dir, jit="auto"):
    """jit_compile="auto" on a model whose weights have fixed names, so a
    second process finds the first one's remembered decision."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu", name="remembered_1"),
            keras.layers.Dense(1, name="remembered_2"),
        ]
    )
    model.compile("adam", "mse")
    x = np.random.rand(512, 4).astype("float32")
    y = np.random.rand(512, 1).astype("float32")
    tuner = keras_xla.XLATuner(verbose=0, jit_compile=jit, baseline=False)
    start = len(EVENTS)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[tuner])
    out = summary(tuner, start)
    decision = tuner.report.decision
    out["decision"] = decision.to_dict() if decision else None
    # Compilations of anything else: the no-jit step's ops, op by op.
    steps = ("jit(train_step)", "jit(test_step)")
    out["other_compilations"] = sum(
        n not in steps for n, _, _ in EVENTS[start:]
    )
    return out


def precision(log_dir):
    """A model built under mixed_bfloat16 whose output layer computes in
    bfloat16: the precision checks' `low-precision-output` on JAX."""
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model = dense_model()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    x = np.random.rand(64, 4).astype("float32")
    y = np.random.rand(64, 1).astype("float32")
    tuner = keras_xla.XLATuner(verbose=0, baseline=False)
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[tuner])
    return {"codes": tuner.report.finding_codes()}


class Watch(keras.callbacks.Callback):
    """What the model computes in during the fit: the first and last
    layers' compute dtypes and the optimizer's class, at each epoch's
    first step."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.seen.append(state_of(self.model))


def state_of(model):
    return [
        model.dtype_policy.name,
        model.layers[0].compute_dtype,
        model.layers[-1].compute_dtype,
        type(model.optimizer).__name__,
    ]


def precision_fixed(log_dir):
    """mixed_precision set on JAX: the model computes in it for the fit
    (mixed_float16 with loss scaling), and is as it was after it
    (keep=False); with keep=True the policy stays."""
    x = np.random.rand(64, 4).astype("float32")
    y = np.random.rand(64, 1).astype("float32")
    out = {}
    for name, keep in (
        ("mixed_bfloat16", False),
        ("mixed_float16", False),
        ("mixed_bfloat16", True),
    ):
        model = dense_model()
        watch = Watch()
        tuner = keras_xla.XLATuner(
            log_dir=os.path.join(log_dir, name),
            verbose=0,
            baseline=False,
            mixed_precision=name,
            keep=keep,
        )
        start = len(EVENTS)
        model.fit(
            x, y, batch_size=8, epochs=2, verbose=0, callbacks=[tuner, watch]
        )
        result = summary(tuner, start)
        result["during"] = watch.seen
        result["after"] = state_of(model)
        result["loss"] = float(model.evaluate(x, y, verbose=0))
        # The compiled step's own text: what XLA computes in.
        with open(tuner.report.hlo.text) as f:
            text = f.read()
        result["hlo_dtypes"] = sorted(set(re.findall(r"\b(b?f16)\[", text)))
        out[f"{name}{'_kept' if keep else ''}"] = result
    return out


def precision_auto(log_dir):
    """mixed_precision="auto" on JAX: the precision trial between float32
    and the recommended policy (planted: this CPU's recommendation is not
    the test's to choose), with XLA on, and with jit_compile="auto" too
    (four candidates). mixed_float16 (without XLA: both candidates run)
    wraps the optimizer for loss scaling between windows: the fit's state
    must follow it."""
    from keras_xla import precision as precision_lib

    real = precision_lib.recommend_policy
    x = np.random.rand(512, 4).astype("float32")
    y = np.random.rand(512, 1).astype("float32")
    out = {}
    runs = (
        ("bf16", "mixed_bfloat16", True),
        ("fp16", "mixed_float16", False),
        ("both", "mixed_bfloat16", "auto"),
    )
    try:
        for label, recommended, jit in runs:
            precision_lib.recommend_policy = (
                lambda devices=None, cpu_flags=None, r=recommended: (r, "test")
            )
            model = dense_model()
            watch = Watch()
            tuner = keras_xla.XLATuner(
                verbose=0,
                jit_compile=jit,
                mixed_precision="auto",
                baseline=False,
                keep=True,
                trial_memory=False,
            )
            start = len(EVENTS)
            model.fit(
                x,
                y,
                batch_size=8,
                epochs=2,
                verbose=0,
                callbacks=[tuner, watch],
            )
            result = summary(tuner, start)
            decision = tuner.report.decision
            result["decision"] = decision.to_dict() if decision else None
            result["during"] = watch.seen
            result["after"] = state_of(model)
            result["finite"] = all(
                bool(np.isfinite(w).all()) for w in model.get_weights()
            )
            result["findings"] = [
                (f.code, f.message) for f in tuner.report.findings
            ]
            out[label] = result
    finally:
        precision_lib.recommend_policy = real
    return out


def memory_control(log_dir):
    """The same fit with XLA on and no trial: its compilations besides
    the step functions' (building the optimizer's state)."""
    return auto_memory(log_dir, jit=True)


def xla_model(log_dir):
    """keras_xla.XLAModel on JAX: a ValueError naming the fix, built
    functional, subclassed or from a model."""
    from keras_xla import XLAModel

    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1)(inputs)
    attempts = {
        "functional": lambda: XLAModel(inputs, outputs),
        "subclassed": lambda: type("Net", (XLAModel,), {})(),
        "from_model": lambda: XLAModel.from_model(dense_model()),
    }
    out = {}
    for name, build in attempts.items():
        try:
            build()
            out[name] = None
        except Exception as error:  # noqa: BLE001
            out[name] = [type(error).__name__, str(error)]
    return out


def main():
    args = sys.argv[1:]
    cache_dir = None
    if "--cache" in args:
        i = args.index("--cache")
        cache_dir = args[i + 1]
        del args[i : i + 2]
    if "--with-tensorflow" in args:
        args.remove("--with-tensorflow")
    log_dir, scenarios = args[0], args[1:]
    results = {
        "tensorflow_imported": False,
        "tf_xla_flags": os.environ.get("TF_XLA_FLAGS"),
    }
    for name in scenarios:
        sub = os.path.join(log_dir, name)
        if name == "cache":
            results[name] = cache(sub, cache_dir)
        else:
            results[name] = globals()[name](sub)
    results["tensorflow_imported"] = sys.modules.get("tensorflow") is not None
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()

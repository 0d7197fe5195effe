"""Are the tuner's times true on JAX? Against separate fits, side by side.

JAX returns from the step before its work is done, so a timer around the
call times the dispatch. For each model, in one process on Keras's JAX
backend: a fit with the default `XLATuner` (XLA on, its no-XLA baseline)
gives its steady XLA step median and the verdict's speedup and range; a
fit with `XLATuner(jit_compile="auto")` gives the trial's choice; then
fresh copies of the model without and with XLA, neither with the tuner,
are warmed up and fit in alternating blocks, each step timed by a
callback that is not async-safe (so Keras reads each step's logs on the
training thread: the step's results exist when it stamps). Printed per
model: the separate fits' step medians, their speedup and its spread
over the blocks, their wall time per step (a fit with no callback: the
loop's own period, Keras's work between steps included), the tuner's
XLA median against the separate XLA fits' (goal: within 10%),
the verdict's speedup and range (goal: within 2x of the separate
fits, on the same side of 1.0 where they are clearly apart), and
"auto"'s choice against the faster separate fit.

Models: keras-io's MNIST convnet (28x28x1, batch 128), a Transformer
block on token ids (keras-io's text classifier: 200 tokens, batch 32)
and a Dense layer on 32 features (keras-io's custom train_step in JAX
guide: batch 32), where the step is shorter than its dispatch.

Every fit of interest starts with `jax.clear_caches()`, as in a fresh
process: JAX's op-by-op dispatch (Keras's `jit_compile=False`) slows as
its caches grow within a process (`benchmarks/jax_no_xla_drift.py
--clear-at N` shows it; BENCHMARKS.md has its figures), so a no-XLA fit
late in a process is slower than the same fit in a user's own run.
Each separate block is therefore cleared and warmed up (three untimed
steps, which compile) before it is timed.

Run: python benchmarks/jax_verdict_truth.py [--blocks 4] [--models ...]
"""

import argparse
import os
import platform
import statistics
import tempfile
import time

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras_xla  # noqa: E402, I001  (first)
import keras  # noqa: E402
import numpy as np  # noqa: E402


def convnet():
    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def convnet_data(n):
    rng = np.random.default_rng(0)
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    return x, rng.integers(0, 10, n)


class TokenAndPosition(keras.layers.Layer):
    def __init__(self, length, vocab, dim):
        super().__init__()
        self.tokens = keras.layers.Embedding(vocab, dim)
        self.positions = keras.layers.Embedding(length, dim)

    def call(self, x):
        length = keras.ops.shape(x)[-1]
        positions = keras.ops.arange(0, length, 1)
        return self.tokens(x) + self.positions(positions)


def transformer():
    length, vocab, dim = 200, 20000, 32
    inputs = keras.Input((length,), dtype="int32")
    x = TokenAndPosition(length, vocab, dim)(inputs)
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=dim)
    x = keras.layers.LayerNormalization()(x + attention(x, x))
    ff = keras.Sequential(
        [keras.layers.Dense(32, activation="relu"), keras.layers.Dense(dim)]
    )
    x = keras.layers.LayerNormalization()(x + ff(x))
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(20, activation="relu")(x)
    outputs = keras.layers.Dense(2, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def transformer_data(n):
    rng = np.random.default_rng(0)
    return rng.integers(0, 20000, (n, 200)), rng.integers(0, 2, n)


def dense():
    inputs = keras.Input((32,))
    return keras.Model(inputs, keras.layers.Dense(1)(inputs))


def dense_data(n):
    rng = np.random.default_rng(0)
    x = rng.random((n, 32), dtype=np.float32)
    return x, rng.random((n, 1), dtype=np.float32)


# name: (model, data, batch, loss, steps per block, tuner fit's steps)
MODELS = {
    "convnet": (
        convnet,
        convnet_data,
        128,
        "sparse_categorical_crossentropy",
        12,
        80,
    ),
    "transformer": (
        transformer,
        transformer_data,
        32,
        "sparse_categorical_crossentropy",
        20,
        120,
    ),
    "dense": (dense, dense_data, 32, "mse", 200, 400),
}


class StepClock(keras.callbacks.Callback):
    """Each step from its batch begin until its logs were read (not
    async-safe: Keras reads them on the training thread first)."""

    def __init__(self):
        super().__init__()
        self.seconds, self._start = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def built(name, jit):
    make, _, _, loss, _, _ = MODELS[name]
    keras.utils.set_random_seed(0)
    model = make()
    model.compile(optimizer="adam", loss=loss, jit_compile=jit)
    return model


def fresh(model, x, y, batch):
    """As in a fresh process: JAX's caches cleared, then three untimed
    steps (the step compiles again)."""
    import jax

    jax.clear_caches()
    model.fit(x[: 3 * batch], y[: 3 * batch], batch_size=batch, verbose=0)


def separate(name, blocks):
    """Median step without and with XLA (alternating blocks), and the
    speedup of each block pair."""
    _, data, batch, _, steps, _ = MODELS[name]
    x, y = data(batch * steps)
    models = {False: built(name, False), True: built(name, True)}
    pooled = {False: [], True: []}
    walls = {False: [], True: []}
    speedups = []
    for block in range(blocks):
        medians = {}
        order = (False, True) if block % 2 == 0 else (True, False)
        for jit in order:
            fresh(models[jit], x, y, batch)
            clock = StepClock()
            models[jit].fit(
                x, y, batch_size=batch, verbose=0, callbacks=[clock]
            )
            pooled[jit] += clock.seconds[1:]
            medians[jit] = statistics.median(clock.seconds[1:])
            # The loop's own period: a fit with no callback of ours.
            fresh(models[jit], x, y, batch)
            start = time.perf_counter()
            models[jit].fit(x, y, batch_size=batch, verbose=0)
            walls[jit].append((time.perf_counter() - start) / steps)
        speedups.append(medians[False] / medians[True])
    return (
        statistics.median(pooled[False]) * 1000,
        statistics.median(pooled[True]) * 1000,
        speedups,
        statistics.median(walls[False]) * 1000,
        statistics.median(walls[True]) * 1000,
    )


def tuned(name, **kwargs):
    _, data, batch, _, _, steps = MODELS[name]
    x, y = data(batch * steps // 2)
    model = built(name, True)
    import jax

    jax.clear_caches()  # as in a fresh process (above)
    with tempfile.TemporaryDirectory() as log_dir:
        tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, **kwargs)
        model.fit(
            x, y, batch_size=batch, epochs=2, verbose=0, callbacks=[tuner]
        )
    return tuner.report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    import jax

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; "
        f"jax {jax.__version__}, keras {keras.__version__}"
    )
    for name in args.models:
        report = tuned(name)
        verdict = report.verdict
        last = report.epochs[-1]
        auto = tuned(name, jit_compile="auto")
        no_xla_ms, xla_ms, speedups, no_xla_wall, xla_wall = separate(
            name, args.blocks
        )
        truth = no_xla_ms / xla_ms
        apart = min(speedups) > 1.0 or max(speedups) < 1.0
        chosen = auto.jit.enabled if auto.jit else None
        print(f"\n{name}")
        print(
            f"  separate fits: no XLA {no_xla_ms:.3f} ms, XLA "
            f"{xla_ms:.3f} ms, speedup {truth:.3f} (blocks "
            f"{min(speedups):.3f}-{max(speedups):.3f}; "
            f"{'clearly apart' if apart else 'not clearly apart'})"
        )
        print(
            f"  separate fits' wall time per step: no XLA "
            f"{no_xla_wall:.3f} ms, XLA {xla_wall:.3f} ms, speedup "
            f"{no_xla_wall / xla_wall:.3f}"
        )
        print(
            f"  tuner, last epoch: median {last.step_time_ms['median']} ms "
            f"(dispatch {last.dispatch_ms_median} ms), "
            f"{last.step_time_ms['median'] / xla_ms:.3f} of the separate "
            "XLA fits'"
        )
        if verdict is not None and verdict.speedup is not None:
            low, high = verdict.speedup_low, verdict.speedup_high
            print(
                f"  verdict: {verdict.speedup}x ({low}-{high}), "
                f"{verdict.baseline_step_ms} -> {verdict.xla_step_ms} ms; "
                f"{verdict.speedup / truth:.3f} of the separate fits'"
            )
        else:
            print(f"  verdict: {verdict.headline if verdict else None}")
        print(
            f"  auto chose XLA {'on' if chosen else 'off'}; separate fits: "
            f"{'on' if truth > 1 else 'off'} faster"
        )


if __name__ == "__main__":
    main()

"""XLATuner's overhead on Keras's JAX backend, and the compile cache's
time to first step.

Part 1, in this process: one model (jit-compiled by Keras's JAX trainer),
trained in rounds of short fits alternating three arms: plain, a second
plain arm (the control: the noise floor) and with `XLATuner` (its tap on
the step functions, its compile-event listener and its hooks; the no-XLA
baseline windows off, no log dir: the steady step is what is measured).
Each arm's steady step time is the median interval between train batch
begins: the host's time per call, which is what the tuner's per-call
work adds to (JAX dispatches asynchronously, so where the device is the
bottleneck the host runs ahead and this is not the step's time), and
each fit's wall time per step (the device's work included, and the
tuner's per-fit work), after warm-up fits that compiled every shape.
The goal: the tuner's steady step within 1% of plain's.

Part 2, in child processes: fit start to the end of the first train step
(its result ready) with `XLATuner(compile_cache=DIR)`: an empty cache
(compiles), then the same cache in a new process (loads), and without a
cache for reference.

With `--tiny`, the model is one Dense layer on 32 features in batches of
32 (keras-io's custom train_step in JAX guide): a step shorter than its
dispatch, where every microsecond of the tuner's own work shows.

Run: KERAS_BACKEND=jax python benchmarks/jax_overhead.py [--rounds 30]
[--steps 200] [--tiny] [--no-first-step]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["KERAS_BACKEND"] = "jax"
sys.modules.setdefault("tensorflow", None)  # the JAX path needs none

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_xla  # noqa: E402

BATCH, FEATURES, WIDTH = 128, 64, 512
TINY = "--tiny" in sys.argv
if TINY:
    BATCH, FEATURES = 32, 32


def make_tiny():
    """keras-io's custom train_step in JAX guide's model: one Dense layer
    on 32 features, a step far shorter than its dispatch."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((FEATURES,))
    model = keras.Model(inputs, keras.layers.Dense(10)(inputs))
    model.compile(
        "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def make_model():
    if TINY:
        return make_tiny()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(WIDTH, activation="relu"),
            keras.layers.Dense(WIDTH, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def data(steps):
    rng = np.random.default_rng(0)
    x = rng.random((steps * BATCH, FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, steps * BATCH)
    return x, y


class BatchBegins(keras.callbacks.Callback):
    """Intervals between train batch begins (the steady step)."""

    def __init__(self):
        super().__init__()
        self.intervals, self._last = [], None

    def on_train_begin(self, logs=None):
        self._last = None

    def on_train_batch_begin(self, batch, logs=None):
        now = time.perf_counter()
        if self._last is not None:
            self.intervals.append(now - self._last)
        self._last = now


def overhead(rounds, steps):
    model = make_model()
    x, y = data(steps)
    arms = {"plain": [], "control": [], "tuner": []}
    walls = {"plain": [], "control": [], "tuner": []}
    for _ in range(2):  # warm-up: compile, and the first fit's costs
        model.fit(x, y, batch_size=BATCH, verbose=0)
        tuner = keras_xla.XLATuner(verbose=0, baseline=False)
        model.fit(x, y, batch_size=BATCH, verbose=0, callbacks=[tuner])
    order = list(arms)
    for r in range(rounds):
        for name in order[r % 3 :] + order[: r % 3]:
            timer = BatchBegins()
            callbacks = [timer]
            if name == "tuner":
                callbacks.insert(
                    0, keras_xla.XLATuner(verbose=0, baseline=False)
                )
            start = time.perf_counter()
            model.fit(x, y, batch_size=BATCH, verbose=0, callbacks=callbacks)
            walls[name].append((time.perf_counter() - start) / steps)
            # The round's median step: robust to one slow interval.
            arms[name].append(statistics.median(timer.intervals))
    medians = {k: statistics.median(v) * 1000 for k, v in arms.items()}
    ratios = [t / p for t, p in zip(arms["tuner"], arms["plain"])]
    control = [c / p for c, p in zip(arms["control"], arms["plain"])]
    wall = {k: statistics.median(v) * 1000 for k, v in walls.items()}
    wall_ratios = [t / p for t, p in zip(walls["tuner"], walls["plain"])]
    return {
        "step_ms": {k: round(v, 4) for k, v in medians.items()},
        "fit_ms_per_step": {k: round(v, 4) for k, v in wall.items()},
        "fit_tuner_over_plain": round(statistics.median(wall_ratios), 4),
        "tuner_over_plain": round(statistics.median(ratios), 4),
        "control_over_plain": round(statistics.median(control), 4),
        "rounds": rounds,
        "steps_per_fit": steps,
    }


def first_step(cache_dir):
    """Child process: fit start to the first step's result."""
    model = make_model()
    x, y = data(8)
    marks = {}

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if "first" not in marks:
                jax.block_until_ready(logs)
                marks["first"] = time.perf_counter()

    kwargs = {"compile_cache": cache_dir} if cache_dir else {}
    tuner = keras_xla.XLATuner(verbose=0, baseline=False, **kwargs)
    start = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, verbose=0, callbacks=[tuner, FirstStep()])
    report = tuner.report
    cache = report.compile_cache
    return {
        "first_step_s": round(marks["first"] - start, 4),
        "compilations": report.total_compilations,
        "hits": cache.hits if cache else None,
        "misses": cache.misses if cache else None,
    }


def child(cache_dir):
    cmd = [sys.executable, __file__, "--child", cache_dir or ""]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--child", default=None)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--no-first-step", action="store_true")
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(first_step(args.child or None)))
        return
    print(f"jax {jax.__version__}, keras {keras.__version__}, devices "
          f"{jax.devices()}, cpus {os.cpu_count()}")  # fmt: skip
    result = overhead(args.rounds, args.steps)
    print(json.dumps(result, indent=1))
    goal = result["tuner_over_plain"] <= 1.01
    print(f"steady step: tuner/plain {result['tuner_over_plain']:.4f} "
          f"(control/plain {result['control_over_plain']:.4f}); goal <= "
          f"1.01: {'met' if goal else 'NOT met'}; whole fit per step: "
          f"tuner/plain {result['fit_tuner_over_plain']:.4f}")  # fmt: skip
    if args.no_first_step:
        return
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        rows = {
            "no cache": child(None),
            "empty cache": child(cache),
            "warm cache (new process)": child(cache),
        }
    for name, row in rows.items():
        print(f"time to first step, {name}: {row['first_step_s']:.3f} s "
              f"(compilations {row['compilations']}, hits {row['hits']}, "
              f"misses {row['misses']})")  # fmt: skip


if __name__ == "__main__":
    main()

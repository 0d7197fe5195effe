"""XLATuner's overhead on steady-state step time, side by side.

Three identical models with `jit_compile=True`: one trained plainly, an
identical copy of it (the control, which shows the noise floor), and one
with `XLATuner`, after warm-up fits that compile them, timed in rounds of
short `fit` calls (see `paired.py` for the method). The figure covers all
the tuner's costs: the probe ops inside the step, its hooks, the ring
buffer read per run, per-epoch statistics and summaries. Two parts are
also measured on their own, where fit's noise cannot hide them: the time
spent in the tuner's hooks, and the probed train function against
Keras's own for the same model, called directly in alternating blocks.

Run: python benchmarks/tuner_overhead.py [--rounds 40] [--steps 200]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
from paired import conv_dataset, report, time_pairs  # noqa: E402

from keras_xla import XLATuner  # noqa: E402


def make_model(cls=keras.Model):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((64, 16))
    h = keras.layers.Conv1D(64, 3, activation="relu")(inputs)
    h = keras.layers.Conv1D(64, 3, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    model = cls(inputs, keras.layers.Dense(1)(h))
    model.compile("adam", "mse", jit_compile=True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    ds = conv_dataset(args.batch_size)
    plain, control, tuned = make_model(), make_model(), make_model()
    tuner = XLATuner(verbose=0)
    hook_seconds = time_hooks(tuner)
    common = dict(
        epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False
    )
    runs = {
        "plain": lambda: plain.fit(ds, **common),
        "control": lambda: control.fit(ds, **common),
        "tuner": lambda: tuned.fit(ds, callbacks=[tuner], **common),
    }
    runs["tuner"]()  # compiles, and runs the one-off HLO analysis
    hook_seconds[0] = 0.0
    times = time_pairs(runs, args.rounds)
    print(
        f"steps per fit: {args.steps}, rounds: {args.rounds}, "
        f"batch size: {args.batch_size}; tuner compilations in the last "
        f"fit: {tuner.report.total_compilations}"
    )
    report(times, args.steps, "plain", ["control", "tuner"])
    fits = len(times["tuner"]) + 1  # and time_pairs' own warm-up fit
    per_step = hook_seconds[0] / (fits * args.steps)
    plain_step = min(times["plain"]) / args.steps
    print(
        f"tuner's own callback time: {per_step * 1e6:.1f} us per step, "
        f"{per_step / plain_step:.2%} of the fastest plain step"
    )
    print(
        "probed train function / Keras's, called directly in alternating "
        f"blocks: median ratio {probe_cost(make_model(), ds):.4f}"
    )


def probe_cost(model, ds, blocks=200, block=25):
    """The probed, guarded train function the tuner installed against
    Keras's own one for the same model (both compiled), called directly in
    alternating blocks: the in-graph probe's cost without fit's noise."""
    model.fit(ds, epochs=1, steps_per_epoch=5, verbose=0)
    plain_fn = model.train_function
    model.fit(
        ds,
        callbacks=[XLATuner(verbose=0)],
        epochs=1,
        steps_per_epoch=5,
        verbose=0,
    )
    probed_fn = model.train_function
    iterator = iter(ds)
    times = {plain_fn: [], probed_fn: []}
    for fn in times:
        for _ in range(block):
            fn(iterator)
    for i in range(blocks):
        for fn in list(times)[:: 1 if i % 2 else -1]:
            start = time.perf_counter()
            for _ in range(block):
                logs = fn(iterator)
            float(logs["loss"])  # wait for the last step
            times[fn].append(time.perf_counter() - start)
    ratios = [q / p for p, q in zip(times[plain_fn], times[probed_fn])]
    return statistics.median(ratios)


def time_hooks(tuner):
    """Wraps the tuner's hooks to add up the time spent in them."""
    total = [0.0]
    for name in (
        "on_train_begin",
        "on_epoch_begin",
        "on_train_batch_begin",
        "on_epoch_end",
        "on_train_end",
    ):
        hook = getattr(tuner, name)

        def timed(*args, _hook=hook, **kwargs):
            start = time.perf_counter()
            try:
                return _hook(*args, **kwargs)
            finally:
                total[0] += time.perf_counter() - start

        setattr(tuner, name, timed)
    return total


if __name__ == "__main__":
    main()

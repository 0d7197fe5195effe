"""XLATuner's overhead on steady-state step time, side by side.

One model with `jit_compile=True`, trained in three configurations: plain
(Keras's own train function), a second plain arm (the control, which shows
the noise floor), and with `XLATuner` (its probed train function and its
hooks), after warm-up fits that compile both functions, timed in rounds of
short `fit` calls (see `paired.py` for the method). `--separate-models`
gives each configuration its own identical copy of the model instead; on
this kind of machine identical copies can differ by a few percent for a
whole process, which the shared model rules out. The headline is the
steady-state step time: the median interval between train batch begins,
which holds the probe ops inside the step and the tuner's per-step hook.
The whole-fit wall time adds what the tuner does once per fit (train
begin and end, the ring buffer read, per-epoch statistics). Two parts are
also measured on their own, where fit's noise cannot hide them: the time
spent in the tuner's hooks, and the probed train function against
Keras's own for the same model, called directly in alternating blocks.

`--autotune` turns tf.data autotuning on (off by default), to show its
teardown stall (`paired.py`): it moves whole-fit wall times, not step
times.

Each fit is a first epoch, so the verdict's no-XLA baseline windows are
off unless `--baseline` (their cost is the report's own figure).

Run: python benchmarks/tuner_overhead.py [--rounds 96] [--steps 200]
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
    parser.add_argument("--rounds", type=int, default=96)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--separate-models",
        action="store_true",
        help="three identical models instead of one shared model",
    )
    parser.add_argument(
        "--autotune",
        action="store_true",
        help="turn tf.data autotuning on (its teardown stalls some fits)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="keep the verdict's no-XLA baseline windows in every fit",
    )
    args = parser.parse_args()

    ds = conv_dataset(args.batch_size, autotune=args.autotune)
    # Every fit here is a first epoch, where the verdict's baseline trains
    # windows without XLA: a cost of the first epoch (the report's
    # `baseline.cost_seconds`, checked by verdict_truth.py), not of the
    # steady state this measures, unless --baseline.
    tuner = XLATuner(verbose=0, baseline=args.baseline)
    hook_calls = time_hooks(tuner)
    common = dict(
        epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False
    )
    if args.separate_models:
        plain, control, tuned = make_model(), make_model(), make_model()
        runs = {
            "plain": lambda cbs: plain.fit(ds, callbacks=cbs, **common),
            "control": lambda cbs: control.fit(ds, callbacks=cbs, **common),
            "tuner": lambda cbs: tuned.fit(
                ds, callbacks=[tuner, *cbs], **common
            ),
        }
        runs["tuner"]([])  # compiles, and runs the one-off HLO analysis
    else:
        setups = {
            "plain": (False, []),
            "control": (False, []),
            "tuner": (True, []),
        }
        runs = shared_model_runs(make_model(), ds, tuner, common, setups)
    for durations in hook_calls.values():
        durations.clear()
    times = time_pairs(runs, args.rounds)
    print(
        f"steps per fit: {args.steps}, rounds: {args.rounds}, "
        f"batch size: {args.batch_size}, tf.data autotune: "
        f"{'on' if args.autotune else 'off'}; tuner compilations in the "
        f"last fit: {tuner.report.total_compilations}"
    )
    report(times, args.steps, "plain", ["control", "tuner"])
    fits = len(times["tuner"]["wall"]) + 1  # and time_pairs' warm-up fit
    plain_step = statistics.median(times["plain"]["step_ms"]) / 1e3
    total = sum(sum(durations) for durations in hook_calls.values())
    step_hook = statistics.median(hook_calls["on_train_batch_begin"])
    per_fit = (total - sum(hook_calls["on_train_batch_begin"])) / fits
    print(
        f"tuner's own callback time: {total / (fits * args.steps) * 1e6:.1f}"
        f" us per step, {total / (fits * args.steps) / plain_step:.2%} of "
        f"the plain steady-state step; per-step hook median "
        f"{step_hook * 1e6:.1f} us ({step_hook / plain_step:.2%}); per-fit "
        f"hooks {per_fit * 1e3:.2f} ms per fit"
    )
    print(
        "probed train function / Keras's, called directly in alternating "
        f"blocks: median ratio {probe_cost(make_model(), ds):.4f}"
    )


def shared_model_runs(model, ds, tuner, common, setups):
    """Runs that all train one model, so that its variables' placement in
    memory, which can make identical copies differ by a few percent for a
    whole process, is the same for every configuration. `setups` maps a
    name to (with the tuner?, extra callbacks). Fits without the tuner run
    Keras's own compiled train function, fits with it the tuner's probed
    one; each is put back before its fit, and neither is rebuilt."""
    model.fit(ds, **common)
    keras_fn = model.train_function
    model.fit(ds, callbacks=[tuner], **common)  # compiles, one-off analysis
    tuned_fn = model.train_function

    def run(with_tuner, extra, clock):
        model.train_function = tuned_fn if with_tuner else keras_fn
        own = [tuner] if with_tuner else []
        model.fit(ds, callbacks=[*own, *extra, *clock], **common)

    return {
        name: lambda clock, setup=setup: run(*setup, clock)
        for name, setup in setups.items()
    }


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
    """Wraps the tuner's hooks to record the wall time of every call;
    returns hook name -> list of seconds."""
    calls = {}
    for name in (
        "on_train_begin",
        "on_epoch_begin",
        "on_train_batch_begin",
        "on_epoch_end",
        "on_train_end",
    ):
        hook = getattr(tuner, name)
        durations = calls[name] = []

        def timed(*args, _hook=hook, _durations=durations, **kwargs):
            start = time.perf_counter()
            try:
                return _hook(*args, **kwargs)
            finally:
                _durations.append(time.perf_counter() - start)

        setattr(tuner, name, timed)
    return calls


if __name__ == "__main__":
    main()

"""How long `fit` takes to return after its last step, with tf.data
autotuning on and off.

Keras frees the epoch's tf.data iterator when `fit` returns. With
autotuning on (tf.data's default), freeing it can wait for the autotune
thread's next wake-up. That thread's period starts at 10 ms and doubles
(up to 60 s), so the longer the fit ran, the longer the wait can be. This
script fits one compiled model for increasing numbers of steps,
`--repeats` times each, with autotuning on and off, and prints the time
from the last callback hook (`on_train_end`) to `fit` returning. None of
it is step time: `XLATuner`'s statistics do not see it, and
`tuner_overhead.py` turns autotuning off so that it does not blur whole-fit
times.

Then, with autotuning on, it counts the stalls of 200-step fits in rounds
over four callback setups: none, one that busy-waits 1.5 ms at epoch end,
one that sleeps 1.5 ms there, and `XLATuner` (about 1 ms of Python work
at epoch end). Work that holds the CPU and the interpreter at the end of
training makes the stall more likely; waiting does not, or much less.

Run: python benchmarks/tfdata_teardown.py [--steps 100 1000 4000]
[--repeats 4] [--rounds 48]
"""

import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
from paired import (  # noqa: E402
    STALL_MS,
    StepClock,
    conv_dataset,
    fisher_exact,
    time_pairs,
)
from tuner_overhead import make_model, shared_model_runs  # noqa: E402

from keras_xla import XLATuner  # noqa: E402


class EpochEndWork(keras.callbacks.Callback):
    """Busy-waits (holding the interpreter) or sleeps at epoch end."""

    async_safe = True

    def __init__(self, seconds, busy):
        super().__init__()
        self.seconds = seconds
        self.busy = busy

    def on_epoch_end(self, epoch, logs=None):
        if not self.busy:
            time.sleep(self.seconds)
            return
        until = time.perf_counter() + self.seconds
        while time.perf_counter() < until:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--steps", type=int, nargs="+", default=[100, 1000, 4000]
    )
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=48)
    args = parser.parse_args()

    model = make_model()
    datasets = {
        "on": conv_dataset(32, autotune=True),
        "off": conv_dataset(32, autotune=False),
    }
    model.fit(datasets["off"], steps_per_epoch=5, verbose=0)  # compiles
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; "
        f"stall = more than {STALL_MS:.0f} ms from train end to return"
    )
    for steps in args.steps:
        for autotune, ds in datasets.items():
            teardown, fit_seconds, step_ms = [], [], []
            for _ in range(args.repeats):
                clock = StepClock()
                start = time.perf_counter()
                model.fit(
                    ds, steps_per_epoch=steps, verbose=0, callbacks=[clock]
                )
                end = time.perf_counter()
                teardown.append(1e3 * (end - clock.train_end))
                fit_seconds.append(end - start)
                step_ms.append(clock.step_ms())
            print(
                f"{steps:5d} steps, autotune {autotune:3}: fit "
                + ", ".join(f"{s:.2f}" for s in fit_seconds)
                + " s; median step "
                + ", ".join(f"{t:.2f}" for t in step_ms)
                + " ms; train end -> return "
                + ", ".join(f"{t:.1f}" for t in teardown)
                + f" ms; stalls {sum(t > STALL_MS for t in teardown)}"
                f"/{len(teardown)}"
            )

    callback_stalls(model, datasets["on"], args.rounds)


def callback_stalls(model, ds, rounds, steps=200):
    """Stall counts of `steps`-step fits with autotuning on, per callback
    setup, all on one model (`shared_model_runs`)."""
    common = dict(epochs=1, steps_per_epoch=steps, verbose=0)
    setups = {
        "none": (False, []),
        "busy 1.5 ms": (False, [EpochEndWork(1.5e-3, busy=True)]),
        "sleep 1.5 ms": (False, [EpochEndWork(1.5e-3, busy=False)]),
        "XLATuner": (True, []),
    }
    tuner = XLATuner(verbose=0)
    runs = shared_model_runs(model, ds, tuner, common, setups)
    times = time_pairs(runs, rounds)
    stalls = {
        name: sum(t > STALL_MS for t in record["teardown_ms"])
        for name, record in times.items()
    }
    print(
        f"{steps}-step fits with autotuning on, {rounds} rounds; callback "
        "work at epoch end and teardown stalls:"
    )
    for name, count in stalls.items():
        line = f"  {name:13} stalls {count}/{rounds}"
        if name != "none":
            p = fisher_exact(count, rounds, stalls["none"], rounds)
            line += f" (against none: p = {p:.3f}, Fisher)"
        print(line)


if __name__ == "__main__":
    main()

"""What the JAX tap's input-wait stamps cost a fast step, side by side.

The tap wraps Keras's train function: each call stamps its start, each
`next()` on Keras's iterator is timed (the wait for the batch) and its
batch's signature looked up. Here a trivial step function that only
takes one batch (numpy, batch 32 x 32 features, as Keras's JAX iterator
yields them) is called directly and through `StepTap.wrap`, in
alternating rounds; printed: each way's median microseconds per call,
the tap's cost (the difference), the input-wait stamps alone (two clock
reads and a sum per batch), and each as a share of a fast step: the
median step of a plain fit of a Dense layer on 32 features (keras-io's
custom train_step in JAX guide), timed in the same process.
Goal: under 1% of that step (the tuner's overhead budget).

Run: python benchmarks/input_stamp_cost.py [--rounds 15] [--calls 20000]
"""

import argparse
import os
import platform
import statistics
import time
import warnings

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
warnings.simplefilter("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_xla.jax_backend.compile_events import CompileEvents  # noqa: E402
from keras_xla.jax_backend.tap import StepTap  # noqa: E402


def step(state, iterator):
    """A step that does nothing but take its batch."""
    return next(iterator), state


def per_call_us(fn, batches, calls):
    iterator = iter(batches)
    start = time.perf_counter()
    for _ in range(calls):
        fn(None, iterator)
    return (time.perf_counter() - start) / calls * 1e6


def stamps_us(calls):
    """The input-wait stamps alone, as the tap takes them around each
    `next()`: two clock reads and a sum."""
    waited = 0.0
    start = time.perf_counter()
    for _ in range(calls):
        asked = time.perf_counter()
        got = time.perf_counter()
        waited += got - asked
    return (time.perf_counter() - start) / calls * 1e6


def fast_step_ms():
    """A Dense layer on 32 features, batch 32, with XLA: the median of a
    plain fit's steps (wall time per step over 200 steps, 5 fits)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("adam", "mse", jit_compile=True)
    rng = np.random.default_rng(0)
    x = rng.random((32 * 200, 32), dtype=np.float32)
    y = rng.random((32 * 200, 1), dtype=np.float32)
    model.fit(x, y, batch_size=32, verbose=0)  # compile, settle
    times = []
    for _ in range(5):
        start = time.perf_counter()
        model.fit(x, y, batch_size=32, verbose=0)
        times.append((time.perf_counter() - start) / 200 * 1000)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batch = (
        rng.random((32, 32), dtype=np.float32),
        rng.random((32, 1), dtype=np.float32),
    )
    batches = [batch] * args.calls
    tap = StepTap(CompileEvents())
    tapped = tap.wrap("train", step)

    def announced(state, iterator):
        tap.arm("train")  # the batch-begin hook's part
        return tapped(state, iterator)

    ways = {"direct": step, "tapped": announced}
    results = {name: [] for name in ways}
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(ways)[::-1]
        for name in order:
            results[name].append(per_call_us(ways[name], batches, args.calls))
            tap.take("train")  # the step log takes the calls each epoch
    stamps = statistics.median(stamps_us(args.calls) for _ in range(5))
    fast = fast_step_ms()
    direct = statistics.median(results["direct"])
    with_tap = statistics.median(results["tapped"])
    cost = with_tap - direct
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; keras "
        f"{keras.__version__}; {args.rounds} rounds of {args.calls} calls"
    )
    print(f"direct: {direct:.2f} us per call; tapped: {with_tap:.2f} us")
    print(
        f"the input-wait stamps alone: {stamps:.2f} us per call, "
        f"{stamps / (fast * 10):.2f}% of a {fast:.3f} ms Dense step (goal: "
        "under 1%)"
    )
    print(
        f"the whole tap (stamps, signature, call record): {cost:.2f} us per "
        f"call, {cost / (fast * 10):.2f}% of that step"
    )


if __name__ == "__main__":
    main()

"""What TensorFlow's input-wait stamps cost a fast step, side by side.

Three copies of one model (a Dense layer on 32 features, batch 32, with
XLA), each with the tuner's probed train function: one with the
input-wait stamps (two timestamps around Keras's get-next and the wait
handed to the step), two without. Their train functions are called on
the same in-memory `tf.data` pipeline, in rounds of shuffled order;
printed: each way's median microseconds per call, the stamps' cost (the
median of the rounds' paired differences against the first plain copy)
beside the second plain copy's (the noise floor: the same function
twice), and the cost as a share of the call; each by the rounds' median
call and by their fastest tenth (the 10th percentile, where a shared
machine's pauses weigh least). Goal: under 1% of the call
(the tuner's overhead budget); a call of this step is mostly Keras's and
TensorFlow's own dispatch, so it is the hardest case.

Also printed: the wait each call saw, as the probe read it (an in-memory
pipeline: tens of microseconds).

Run: python benchmarks/tf_input_stamp_cost.py [--rounds 60] [--calls 100]
"""

import argparse
import os
import platform
import random
import statistics
import time
import warnings

os.environ["KERAS_BACKEND"] = "tensorflow"
warnings.simplefilter("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_xla.tf_backend import step_functions  # noqa: E402
from keras_xla.tf_backend.step_functions import (  # noqa: E402
    Config,
    StepFunctions,
)


def built(stamped):
    """A compiled Dense model whose train function is the tuner's probed
    one, with or without the stamps."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("adam", "mse", jit_compile=True)
    chosen = step_functions._stamped
    if not stamped:
        step_functions._stamped = lambda *args: False
    try:
        functions = StepFunctions.of(model)
        config = Config(True, 1, model.dtype_policy.name)
        functions.prepare(model, "train", config, None)
    finally:
        step_functions._stamped = chosen
    return model, functions


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((32 * 64, 32), dtype=np.float32)
    y = rng.random((32 * 64, 1), dtype=np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    ways = {"plain": built(False), "plain 2": built(False)}
    ways["stamped"] = built(True)
    iterators = {}
    for name, (model, _) in ways.items():
        model.build((None, 32))
        iterators[name] = iter(dataset)
        for _ in range(20):  # trace, compile, settle
            model.train_function(iterators[name])
    results = {name: [] for name in ways}
    fastest = {name: [] for name in ways}
    waits = []
    shuffle = random.Random(0).shuffle
    for _ in range(args.rounds):
        order = list(ways)
        shuffle(order)
        for name in order:
            model, functions = ways[name]
            iterator = iterators[name]
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                model.train_function(iterator)
                times.append(time.perf_counter() - start)
            results[name].append(statistics.median(times) * 1e6)
            times.sort()
            fastest[name].append(times[len(times) // 10] * 1e6)
            probe = functions.probe("train")
            probe.read_new()
            if name == "stamped":
                waits.extend(w for w in probe.waits if w is not None)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; "
        f"tensorflow {tf.__version__}, keras {keras.__version__}; "
        f"{args.rounds} rounds of {args.calls} calls"
    )
    for label, table in (("median", results), ("10th percentile", fastest)):
        plain = statistics.median(table["plain"])
        stamped = statistics.median(table["stamped"])

        def paired(name, table=table):
            pairs = zip(table[name], table["plain"])
            return statistics.median(a - b for a, b in pairs)

        print(
            f"{label} call: plain {plain:.1f} us, stamped {stamped:.1f} us; "
            f"the stamps' cost (median of the rounds' paired differences) "
            f"{paired('stamped'):.1f} us, {paired('stamped') / plain:.2%} of "
            f"the call (goal: under 1%); the same function twice: "
            f"{paired('plain 2'):.1f} us"
        )
    if waits:
        print(
            f"the wait for an in-memory batch: median "
            f"{statistics.median(waits) * 1e6:.0f} us over {len(waits)} calls"
        )


if __name__ == "__main__":
    main()

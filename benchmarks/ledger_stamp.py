"""What the in-memory compile ledger costs per step call.

`compile_ledger.stamp()` dates the ledger's new entries: one listing of
TensorFlow's in-memory directory and a length check when nothing is new.
This times that call idle, with the ledger holding a few entries and with
it full (its 64-entry cap), and then inside a fit's batch-end hook, right
after each step of the overhead benchmark's Conv1D model, where the
tuner would call it: the reason the tuner dates entries call by call only
where it must (a mirrored compile cache, auto-clustering).

Run: python benchmarks/ledger_stamp.py
"""

import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras_xla  # noqa: E402, F401, I001  (first: it sets up the ledger)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from paired import conv_dataset  # noqa: E402
from tuner_overhead import make_model  # noqa: E402

from keras_xla.tf_backend import compile_ledger  # noqa: E402

CALLS = 20000


def main():
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, TensorFlow {tf.__version__}"
    )
    directory = compile_ledger.status().directory
    in_fit(directory)
    step = tf.function(lambda v: v + 1.0, jit_compile=True)
    for wanted in (2, 16, compile_ledger.MAX_ENTRIES):
        size = 100
        while len(compile_ledger.entries(directory)) < wanted:
            step(tf.ones([size]))
            size += 1
        compile_ledger.stamp()
        start = time.perf_counter()
        for _ in range(CALLS):
            compile_ledger.stamp(1.0)
        each = (time.perf_counter() - start) / CALLS
        print(f"{wanted:3d} entries: {each * 1e6:.1f} us per stamp")
    in_fit(directory)


def in_fit(directory, steps=300):
    """stamp() in a batch-end hook, against the step's own time."""
    stamps, ends = [], []

    class Stamp(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())
            start = time.perf_counter()
            compile_ledger.stamp(1.0)
            stamps.append(time.perf_counter() - start)

    model, ds = make_model(), conv_dataset(32)
    model.fit(ds, steps_per_epoch=20, epochs=1, verbose=0)  # compile
    model.fit(ds, steps_per_epoch=steps, verbose=0, callbacks=[Stamp()])
    step = statistics.median(b - a for a, b in zip(ends, ends[1:]))
    each = statistics.median(stamps)
    entries = len(compile_ledger.entries(directory))
    print(
        f"in a fit's batch-end hook ({entries} entries): {each * 1e6:.1f} "
        f"us per stamp, {each / step:.2%} of the {step * 1e3:.2f} ms step"
    )


if __name__ == "__main__":
    main()

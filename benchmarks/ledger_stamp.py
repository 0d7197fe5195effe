"""What the in-memory compile ledger costs per step call.

The tuner dates the ledger's new entries after every train and test call
(`compile_ledger.stamp()`): one listing of TensorFlow's in-memory
directory and a length check when nothing is new. This times that call
with the ledger holding a few entries and with it full (its 64-entry
cap), to compare with a step's time.

Run: python benchmarks/ledger_stamp.py
"""

import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras_xla  # noqa: E402, F401, I001  (first: it sets up the ledger)
import tensorflow as tf  # noqa: E402

from keras_xla.tf_backend import compile_ledger  # noqa: E402

CALLS = 20000


def main():
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, TensorFlow {tf.__version__}"
    )
    directory = compile_ledger.status().directory
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


if __name__ == "__main__":
    main()

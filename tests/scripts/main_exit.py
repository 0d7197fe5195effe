"""Fits in a function called in a loop, on a tf.data pipeline with
`steps_per_epoch`, and `sys.exit(main())` with the exit code given.

Usage: main_exit.py [CODE]
"""

import sys

import keras
import numpy as np
import tensorflow as tf


def train(model, data):
    model.fit(data, epochs=2, steps_per_epoch=4, verbose=0)


def main(argv):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.random.rand(64, 4).astype("float32")
    y = np.random.rand(64, 1).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    for _ in range(2):
        train(model, data)
    print("steps", int(model.optimizer.iterations))
    return int(argv[0]) if argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

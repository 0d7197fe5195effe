"""Fits, then raises an error of its own."""

import keras
import numpy as np


def broken():
    raise RuntimeError("the script's own error")


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.ones((16, 4)), np.ones((16, 1)), batch_size=8, verbose=0)
broken()

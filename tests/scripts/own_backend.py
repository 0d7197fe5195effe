"""Picks its own Keras backend before importing Keras, as many scripts
do: keras-xla run must leave that choice to it."""

import os

os.environ["KERAS_BACKEND"] = "jax"

import keras  # noqa: E402
import numpy as np  # noqa: E402

print("backend", keras.backend.backend())
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.ones((32, 4)), np.ones((32, 1)), batch_size=8, verbose=0)

"""A small backend-agnostic training script for `keras-xla run --compare`
(`compare_backends.py`): a Conv1D regression on numpy data, as a user's
script would be, with nothing of keras_xla in it.

Run: python benchmarks/compare_script.py [EPOCHS]
"""

import sys

import keras
import numpy as np

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
keras.utils.set_random_seed(0)
inputs = keras.Input((64, 8))
h = keras.layers.Conv1D(32, 5, activation="relu")(inputs)
h = keras.layers.Conv1D(32, 5, activation="relu")(h)
h = keras.layers.GlobalAveragePooling1D()(h)
h = keras.layers.Dense(32, activation="relu")(h)
model = keras.Model(inputs, keras.layers.Dense(1)(h))
model.compile(keras.optimizers.Adam(1e-3), "mse")
rng = np.random.default_rng(0)
x = rng.random((2048, 64, 8), dtype=np.float32)
y = rng.random((2048, 1), dtype=np.float32)
model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
print(f"trained {int(model.optimizer.iterations)} steps")

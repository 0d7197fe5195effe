"""A backend-agnostic Keras script: numpy data, one fit.

Usage: fit_numpy.py [EPOCHS] [--hand LOG_DIR] [--exit CODE]
(`--hand`: the script edited by hand, an XLATuner of its own.)
"""

import json
import sys

import keras
import numpy as np

args = sys.argv[1:]
epochs = int(args[0]) if args and args[0].isdigit() else 2
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
     keras.layers.Dense(1)]
)  # fmt: skip
model.compile("sgd", "mse")
rng = np.random.default_rng(0)
x = rng.random((100, 4), dtype=np.float32)  # 7 batches of 16: the last 4
y = rng.random((100, 1), dtype=np.float32)
callbacks = []
if "--hand" in args:
    import keras_xla

    log_dir = args[args.index("--hand") + 1]
    callbacks.append(keras_xla.XLATuner(log_dir=log_dir, verbose=0))
model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=callbacks)
print(json.dumps({"argv": sys.argv, "steps": int(model.optimizer.iterations)}))
if "--exit" in args:
    sys.exit(int(args[args.index("--exit") + 1]))

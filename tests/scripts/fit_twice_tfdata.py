"""Two fits of one model on a tf.data pipeline."""

import keras
import numpy as np
import tensorflow as tf

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x = np.random.rand(64, 4).astype("float32")
y = np.random.rand(64, 1).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
for _ in range(2):
    model.fit(data, epochs=2, verbose=0)
print("steps", int(model.optimizer.iterations))

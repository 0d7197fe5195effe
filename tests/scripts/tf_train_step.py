"""A TensorFlow-only custom train_step (tf.GradientTape): it cannot run
on JAX."""

import keras
import numpy as np
import tensorflow as tf


class TapeModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss}


inputs = keras.Input((4,))
model = TapeModel(inputs, keras.layers.Dense(1)(inputs))
model.compile("sgd", "mse")
x = np.random.rand(256, 4).astype("float32")
y = np.random.rand(256, 1).astype("float32")
model.fit(x, y, batch_size=8, epochs=1, verbose=0)

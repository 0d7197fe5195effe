"""`keras_xla.XLAModel` on a Keras backend other than TensorFlow.

`XLAModel` compiles the train step per replica under `tf.distribute`;
its step is TensorFlow code. On JAX, Keras's trainer already jit-compiles
the whole step and `keras.distribution` spreads it over the devices, so
there is nothing for it to do: building one says so, and names the fix,
instead of failing on `import tensorflow`.
"""

from __future__ import annotations

from typing import Any


def _refuse() -> ValueError:
    import keras

    backend = keras.backend.backend()
    return ValueError(
        "keras_xla.XLAModel needs Keras's TensorFlow backend (it compiles "
        "the step per replica under tf.distribute), and this process runs "
        f"Keras on {backend!r}. On JAX Keras's trainer already jit-compiles "
        "the whole step (and keras.distribution spreads it over devices): "
        "build a keras.Model (keras.Model(inputs, outputs), or subclass "
        "keras.Model) and pass keras_xla.XLATuner() to fit; or set "
        "KERAS_BACKEND=tensorflow to use XLAModel."
    )


class XLAModel:
    """Stands in for `tf_backend.xla_model.XLAModel` off TensorFlow."""

    def __new__(cls, *args: Any, **kwargs: Any):
        raise _refuse()

    @classmethod
    def from_model(cls, model: Any, **kwargs: Any):
        raise _refuse()

"""The TensorFlow side of what a fit and the decision memory record of
the machine: versions, devices, strategy, auto-clustering."""

from __future__ import annotations

from typing import Any


def describe_environment(model: Any) -> dict:
    """Versions, devices, strategy and dtype policy, for the report."""
    import keras
    import tensorflow as tf

    strategy = model.distribute_strategy
    policy = getattr(model, "dtype_policy", None)
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "strategy": type(strategy).__name__,
        "replicas": int(getattr(strategy, "num_replicas_in_sync", 1)),
        "policy": getattr(policy, "name", str(policy)),
    }


def machine() -> tuple[list[str], str]:
    """This process's devices and TensorFlow's version."""
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices()], tf.__version__


def auto_clustering() -> bool:
    """Whether auto-clustering (`tf.config.optimizer.set_jit`) is on."""
    import tensorflow as tf

    return tf.config.optimizer.get_jit() == "autoclustering"

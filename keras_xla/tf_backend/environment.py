"""The TensorFlow side of what a fit and the decision memory record of
the machine: versions, devices (as `DeviceInfo`s), strategy,
auto-clustering."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from typing import Any

from keras_xla.core.hardware import DeviceInfo, host_memory_bytes


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


def device_infos(devices: Iterable[Any] | None = None) -> list[DeviceInfo]:
    """`DeviceInfo`s for `DeviceInfo`s or `tf.config.PhysicalDevice`s.

    Defaults to `tf.config.list_physical_devices()`; a GPU's compute
    capability comes from `tf.config.experimental.get_device_details`.
    """
    import tensorflow as tf

    if devices is None:
        devices = tf.config.list_physical_devices()
    infos = []
    for device in devices:
        if isinstance(device, DeviceInfo):
            infos.append(device)
            continue
        kind = str(device.device_type).upper()
        capability = None
        memory = host_memory_bytes() if kind == "CPU" else None
        if kind == "GPU":
            with contextlib.suppress(ValueError, TypeError, RuntimeError):
                details = tf.config.experimental.get_device_details(device)
                capability = details.get("compute_capability")
            memory = _gpu_memory(device.name)
        infos.append(DeviceInfo(kind, str(device.name), capability, memory))
    return infos


def _gpu_memory(name: str) -> int | None:
    """The memory TensorFlow's allocator gave the GPU of physical device
    `name` (`/physical_device:GPU:0`), None where it does not say."""
    from tensorflow.python.client import device_lib

    index = name.rsplit(":", 1)[-1]
    with contextlib.suppress(Exception):
        for local in device_lib.list_local_devices():
            if local.device_type == "GPU" and local.name.endswith(f":{index}"):
                return int(local.memory_limit) or None
    return None


def worker(model: Any) -> Any:
    """This process's `core.workers.Worker` where the model trains under a
    `MultiWorkerMirroredStrategy` of several workers (TF_CONFIG names
    them), else None."""
    import tensorflow as tf

    from keras_xla.core import workers

    strategy = getattr(model, "distribute_strategy", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    return workers.from_tf_config(
        os.environ.get("TF_CONFIG"), socket.gethostname()
    )

"""The JAX side of a fit's setup: the environment, whether the step is
jit-compiled and why not, and what stays a TensorFlow feature."""

from __future__ import annotations

import math
from typing import Any

from keras_xla import xla_setting
from keras_xla.core import findings as codes
from keras_xla.core.report import JitInfo


def describe_environment(model: Any) -> dict:
    """Versions, devices, distribution and policy, for the report."""
    import jax
    import jaxlib
    import keras

    devices = jax.devices()
    distribution = keras.distribution.distribution()
    return {
        "backend": "jax",
        "keras": keras.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "tensorflow": None,
        "devices": [str(d) for d in devices],
        "platform": devices[0].platform if devices else None,
        "strategy": type(distribution).__name__ if distribution else None,
        "policy": model.dtype_policy.name,
    }


def device_count() -> int:
    """Devices a `keras.distribution` spreads the batch over (1 without
    one)."""
    import keras

    mesh = getattr(keras.distribution.distribution(), "device_mesh", None)
    return math.prod(int(size) for size in getattr(mesh, "shape", None) or ())


def configure_jit(
    model: Any, requested: bool | None
) -> tuple[JitInfo, tuple | None, bool]:
    """Sets `model.jit_compile` to `requested` (None: the model's own).

    Returns the `JitInfo`, the `(code, message, fix)` finding when XLA is
    off although asked for (or None), and whether the setting changed (the
    step functions must then be rebuilt).
    """
    before = bool(model.jit_compile)
    if requested is not None and bool(requested) != before:
        xla_setting.set_xla(model, bool(requested))
    enabled = bool(model.jit_compile) and not model.run_eagerly
    changed = bool(model.jit_compile) != before
    finding = None
    if enabled:
        reason = "Keras's JAX trainer jit-compiles the whole step."
    elif requested and model.run_eagerly:
        reason = (
            "the model was compiled with run_eagerly=True, so Keras runs "
            "the JAX step op by op."
        )
        finding = (
            codes.JIT_DISABLED_RUN_EAGERLY,
            f"XLA is off: {reason}",
            "Compile the model with run_eagerly=False.",
        )
    elif requested:
        layers = [
            layer.name
            for layer in model._flatten_layers()
            if not getattr(layer, "supports_jit", True)
        ]
        reason = (
            "Keras keeps jit_compile off because these layers do not "
            f"support it: {', '.join(layers) or '?'}."
        )
        finding = (
            codes.JIT_DISABLED_BY_LAYER,
            f"XLA is off: {reason}",
            "Move those layers into the input pipeline, or replace them "
            "with layers that support XLA.",
        )
    else:
        reason = "jit_compile is off: the step runs op by op."
    return JitInfo(requested, enabled, reason), finding, changed


def device_infos(devices: Any = None) -> list:
    """JAX's devices (or `devices`, `DeviceInfo`s kept as they are) as
    the precision checks describe them (`core.hardware.DeviceInfo`: the
    kind, the name, a GPU's compute capability)."""
    import jax

    from keras_xla.core.hardware import DeviceInfo

    infos = []
    for device in jax.devices() if devices is None else devices:
        if isinstance(device, DeviceInfo):
            infos.append(device)
            continue
        kind = str(device.platform).upper()
        capability = None
        text = str(getattr(device, "compute_capability", "") or "")
        major, _, minor = text.partition(".")
        if kind == "GPU" and major.isdigit() and minor.isdigit():
            capability = (int(major), int(minor))
        infos.append(DeviceInfo(kind, str(device), capability, _memory(device)))
    return infos


def _memory(device: Any) -> int | None:
    """What `device`'s programs can use: its allocator's limit (GPU,
    TPU), the machine's memory for a CPU; None where unknown."""
    from keras_xla.core.hardware import host_memory_bytes

    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a device without statistics
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return host_memory_bytes() if device.platform == "cpu" else None


def precision_findings(model: Any) -> list[tuple]:
    """`(code, message, fix, place)` of the precision checks
    (`keras_xla.precision.check_precision`: Keras-level) on JAX's
    devices."""
    from keras_xla import precision as precision_lib

    found = precision_lib.check_precision(model, devices=device_infos())
    return [(f.code, f.message, f.fix, (f.message,)) for f in found]


def tf_only_findings(model: Any, settings: Any) -> list[tuple]:
    """`(code, message, fix, place)` for each TensorFlow-only feature the
    tuner was asked for (`backend-unsupported`, one place each)."""
    unsupported = codes.BACKEND_UNSUPPORTED
    out = []
    if getattr(model, "_keras_xla_native_probe", False):
        out.append(
            (
                unsupported,
                "keras_xla.XLAModel is a TensorFlow feature: on JAX it "
                "trains as a plain keras.Model.",
                "Use keras.Model on JAX (Keras's JAX trainer already "
                "compiles the whole step).",
                ("XLAModel",),
            )
        )
    if settings.profile_steps:
        out.append(
            (
                unsupported,
                "profile_steps uses TensorFlow's profiler: no trace was "
                "taken on JAX.",
                "Use jax.profiler.trace(log_dir) around the steps to trace.",
                ("profile_steps",),
            )
        )
    return out


def machine() -> tuple[list[str], str]:
    """This process's devices and JAX's version."""
    import jax

    return [str(d) for d in jax.devices()], f"jax {jax.__version__}"


def auto_clustering() -> None:
    """TensorFlow's auto-clustering: none on JAX."""
    return None


def worker(model: Any) -> Any:
    """This process's `core.workers.Worker` in a JAX multi-process job
    (`jax.distributed.initialize`), else None."""
    import socket

    import jax

    from keras_xla.core import workers

    count = jax.process_count()
    if count < 2:
        return None
    try:
        from jax._src import distributed

        address = distributed.global_state.coordinator_address
    except (ImportError, AttributeError):
        address = None
    return workers.Worker(
        jax.process_index(),
        count,
        socket.gethostname(),
        "jax.distributed",
        address,
    )

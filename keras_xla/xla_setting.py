"""The model's XLA setting: its one writer, and what Keras makes of it.

Keras-level, on every backend: `model.jit_compile` is what Keras's
trainer reads when it builds the step (TensorFlow's `tf.function(
jit_compile=...)`, JAX's `jax.jit` or op by op). keras_xla writes it only
through `set_xla`, and puts it back after the fit.
"""

from __future__ import annotations

import warnings
from typing import Any

# What `XLATuner(jit_compile=...)` takes besides "auto".
JIT_CHOICES = (True, False, None)


def layers_without_jit(model: Any) -> list[str]:
    """Names (with class) of the layers that declare `supports_jit=False`."""
    return [
        f"{layer.name} ({type(layer).__name__})"
        for layer in model._flatten_layers(include_self=False)
        if not getattr(layer, "supports_jit", True)
    ]


def set_xla(model: Any, on: bool) -> bool:
    """Sets `model.jit_compile`, the one place keras_xla writes it, and
    returns the setting in force afterwards: Keras refuses `True` for a
    model with a `supports_jit=False` layer (and warns; keras_xla reports
    the precise cause itself)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.jit_compile = bool(on)
    return bool(model.jit_compile)


def keras_auto_jit(model: Any) -> bool:
    """What Keras's `jit_compile="auto"` resolves to for `model` (off on
    CPU-only machines and under tf.distribute)."""
    try:
        return bool(model._resolve_auto_jit_compile())
    except Exception:  # noqa: BLE001 - a private Keras method
        return False


def compiled_jit_setting(model: Any) -> Any:
    """The `jit_compile` the model was compiled with (None: unknown)."""
    config = getattr(model, "_compile_config", None)
    return (getattr(config, "config", None) or {}).get("jit_compile")

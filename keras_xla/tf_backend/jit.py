"""Resolve whether XLA is really on for a model, and why not.

Keras 3 turns `jit_compile` off without an error in several cases: a layer
with `supports_jit=False` (StringLookup, IntegerLookup, Hashing, ...), op
determinism enabled, `run_eagerly=True`, and `"auto"` on a CPU-only machine
or under a `tf.distribute` strategy. Under a strategy with several replicas,
`jit_compile=True` fails at run time, because Keras compiles
`strategy.run(step)` as one XLA cluster. `configure_jit()` applies what was
asked where it can work and returns a `JitInfo` that names the cause.
"""

from __future__ import annotations

from typing import Any

from keras_xla.core import findings
from keras_xla.core.report import JitInfo
from keras_xla.xla_setting import (
    JIT_CHOICES,
    compiled_jit_setting,
    keras_auto_jit,
    layers_without_jit,
    set_xla,
)


def op_determinism_enabled() -> bool:
    # No public getter; Keras reads this one.
    from tensorflow.python.framework import config as tf_config

    return bool(tf_config.is_op_determinism_enabled())


def replicas_in_sync(model: Any) -> int:
    strategy = getattr(model, "distribute_strategy", None)
    return int(getattr(strategy, "num_replicas_in_sync", 1) or 1)


def blocking_cause(model: Any) -> tuple[str, str, str] | None:
    """Why XLA cannot be on for this model: (code, reason, fix) or None."""
    from keras_xla import backends

    unserved = backends.unserved()
    if unserved is not None:
        return (findings.JIT_DISABLED_BY_BACKEND, *unserved)
    if getattr(model, "run_eagerly", False):
        return (
            findings.JIT_DISABLED_RUN_EAGERLY,
            "the model runs eagerly (`run_eagerly=True`), which Keras never "
            "compiles",
            "Compile the model with `run_eagerly=False`.",
        )
    bad = layers_without_jit(model)
    if bad:
        return (
            findings.JIT_DISABLED_BY_LAYER,
            "Keras disables XLA because these layers set "
            f"`supports_jit=False`: {', '.join(bad)}",
            "Move these layers into the tf.data pipeline "
            "(`dataset.map(layer)`) so the model itself can be compiled.",
        )
    if op_determinism_enabled():
        return (
            findings.JIT_DISABLED_BY_DETERMINISM,
            "Keras disables XLA while op determinism is enabled "
            "(`tf.config.experimental.enable_op_determinism()`)",
            "Disable op determinism for XLA training, or accept training "
            "without XLA.",
        )
    replicas = replicas_in_sync(model)
    if replicas > 1 and not getattr(model, "_keras_xla_per_replica", False):
        return (
            findings.JIT_DISABLED_BY_STRATEGY,
            f"the model runs under a tf.distribute strategy with {replicas} "
            "replicas; Keras compiles `strategy.run` as one XLA cluster, "
            "which fails across devices",
            "Build the model as `keras_xla.XLAModel` inside "
            "`strategy.scope()`: it compiles each replica's step instead.",
        )
    return None


def configure_jit(model: Any, requested: Any) -> tuple[JitInfo, tuple | None]:
    """Applies `requested` to `model.jit_compile` where it can work.

    Args:
        model: A compiled Keras model.
        requested: `True` (turn XLA on), `False` (turn it off) or `None`
            (keep the model's own setting and only report it).

    Returns:
        The `JitInfo` for the report, and the blocking cause
        `(code, reason, fix)` when XLA was wanted but cannot be on.
    """
    if requested not in JIT_CHOICES:
        raise ValueError(
            f"Unsupported value `jit_compile={requested!r}`. Possible "
            "choices are: True, False, None."
        )
    wanted = bool(model.jit_compile) if requested is None else requested
    compiled_with = compiled_jit_setting(model)
    if not wanted:
        set_xla(model, False)
        if requested is None and compiled_with is True:
            cause = blocking_cause(model)
            if cause is not None:
                return JitInfo(requested, False, cause[1]), cause
        reason = (
            "XLA not requested (`jit_compile=False`)"
            if requested is False
            else "the model's compiled setting is off (Keras's default "
            "`jit_compile='auto'` is off on CPU-only machines and under "
            "tf.distribute)"
        )
        return JitInfo(requested, False, reason), None
    cause = blocking_cause(model)
    if cause is not None:
        set_xla(model, False)
        return JitInfo(requested, False, cause[1]), cause
    if not set_xla(model, True):
        cause = (
            findings.JIT_DISABLED_BY_LAYER,
            "Keras refused `jit_compile=True` for this model",
            "Check the model's layers for `supports_jit=False`.",
        )
        return JitInfo(requested, False, cause[1]), cause
    reason = "the train and test steps compile with `jit_compile=True`"
    if requested is True and compiled_with is False:
        reason += (
            "; XLATuner(jit_compile=True) turned XLA on over the model's "
            "compile(jit_compile=False) (pass XLATuner(jit_compile=None) to "
            "keep the model's own setting)"
        )
    elif requested is True and compiled_with in (None, "auto"):
        reason += (
            "; XLATuner(jit_compile=True) turned it on where Keras's "
            "default `jit_compile='auto'` would keep it off on a CPU"
            if not keras_auto_jit(model)
            else ""
        )
    return JitInfo(requested, True, reason), None

"""Ops XLA cannot compile: find them, name them, fall back.

When a step holds an op without an XLA kernel (`tf.py_function`,
`tf.numpy_function`, most string ops), TensorFlow fails the first step with
"Detected unsupported operations when trying to compile graph ... on
XLA_CPU_JIT: EagerPyFunc (No registered 'EagerPyFunc' OpKernel ...)
{{node model/layer/EagerPyFunc}} The op is created at: File ..., line N".
This module turns that text into the op types, the layers (from the node
paths) and the user's source line, and can look for such ops before
training (lowering the forward pass to HLO costs no XLA compilation).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from keras_xla.core.findings import XLAUnsupportedOpError  # noqa: F401

MARKER = "Detected unsupported operations when trying to compile"

_OP = re.compile(
    r"(\w+) \(No registered '\w+' OpKernel for \w+ devices compatible "
    r"with node \{\{node ([^}]+)\}\}"
)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_LIBRARY_PARTS = ("site-packages", "dist-packages", "/keras/", "/tensorflow/")


@dataclasses.dataclass(frozen=True)
class UnsupportedOp:
    """One op XLA could not compile, and where it came from."""

    op_type: str
    node: str
    layer: str | None
    source: str | None


def parse_unsupported(
    text: str, layer_names: list[str] | tuple = ()
) -> list[UnsupportedOp]:
    """The unsupported ops a TensorFlow error message names, one per
    distinct (op type, node), each node path mapped to one of the model's
    `layer_names`; empty if the text is not an unsupported-op error."""
    if MARKER not in text:
        return []
    source = _user_source(text)
    return [
        UnsupportedOp(op_type, node, _layer_of(node, layer_names), source)
        for op_type, node in dict.fromkeys(_OP.findall(text))
    ]


def fallback(
    ops: list[UnsupportedOp], on_unsupported: str
) -> tuple[str, tuple[str, str, str, tuple]]:
    """Training goes on without XLA: the jit reason and the finding
    (code, message, fix, place). Raises `XLAUnsupportedOpError` if
    `on_unsupported="raise"`."""
    from keras_xla.core import findings

    parts = []
    for op in ops:
        where = f" in layer `{op.layer}`" if op.layer else ""
        at = f" (created at {op.source})" if op.source else ""
        parts.append(f"`{op.op_type}`{where}{at}")
    reason = "XLA cannot compile the step: no XLA kernel for " + ", ".join(
        parts
    )
    fix = (
        "Move this code out of the model into the tf.data pipeline "
        "(`dataset.map(...)`), or replace it with TensorFlow ops that XLA "
        "supports (no tf.py_function, tf.numpy_function or string ops in "
        "the step); until then train without XLA."
    )
    if on_unsupported == "raise":
        raise XLAUnsupportedOpError(f"{reason}. {fix}")
    finding = (
        findings.UNSUPPORTED_OP,
        f"{reason}. Training continues without XLA (jit_compile=False).",
        fix,
        tuple((op.op_type, op.node) for op in ops),
    )
    return reason, finding


def preflight(model: Any) -> list[UnsupportedOp]:
    """Looks for unsupported ops in the forward pass before training.

    Lowers `model(x, training=True)` to HLO with zero inputs shaped like
    `model.inputs` (batch 1). Lowering is not an XLA compilation: nothing
    is compiled or run. Models without symbolic inputs (subclassed, not yet
    built) are skipped; the runtime guard covers them.
    """
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return []
    import tensorflow as tf

    try:
        tensors = [
            tf.zeros([1 if d is None else d for d in t.shape], dtype=t.dtype)
            for t in inputs
        ]
    except (TypeError, ValueError):
        return []
    args = tensors[0] if len(tensors) == 1 else tensors
    forward = tf.function(lambda x: model(x, training=True), jit_compile=True)
    try:
        forward.experimental_get_compiler_ir(args)(stage="hlo")
    except Exception as error:  # noqa: BLE001 - any failure: inspect text
        return parse_unsupported(str(error), layer_names(model))
    return []


def has_custom_layers(model: Any) -> bool:
    """Whether any layer's class comes from outside Keras (where
    `tf.py_function` and string ops usually hide)."""
    return any(
        not type(layer).__module__.startswith(("keras.", "keras_xla."))
        for layer in model._flatten_layers(include_self=False)
    )


def layer_names(model: Any) -> list[str]:
    """The names of the model's layers (to map node paths to layers)."""
    return [layer.name for layer in model._flatten_layers(include_self=False)]


def _layer_of(node: str, names) -> str | None:
    known = set(names)
    found = None
    for part in node.split("/"):
        base = re.sub(r"_\d+$", "", part)
        if part in known:
            found = part
        elif base in known:
            found = base
    return found


def _user_source(text: str) -> str | None:
    """The innermost frame of the creation traceback outside TF/Keras."""
    _, _, created = text.partition("The op is created at:")
    user = None
    for path, line, fn in _FRAME.findall(created):
        if not any(p in f"/{path}" for p in _LIBRARY_PARTS):
            user = f"{path}:{line} in {fn}"
    return user


def guard(
    fn: Any,
    model: Any,
    fall_back: Callable[[list[UnsupportedOp]], Any],
) -> Callable[[Any], Any]:
    """Wraps a train/test function so that an XLA unsupported-op error
    at run time calls `fall_back(ops)` instead of ending `fit` with a raw
    error; `fall_back` returns the function to run the step with instead
    (built without XLA), or raises.

    The batch of the failing step is consumed by TensorFlow before the
    compile fails; the step after it trains without XLA.
    """
    import tensorflow as tf

    def guarded(iterator):
        try:
            return fn(iterator)
        except tf.errors.InvalidArgumentError as error:
            ops = parse_unsupported(str(error), layer_names(model))
            if not ops:
                raise
            return fall_back(ops)(iterator)

    return guarded

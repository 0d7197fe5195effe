"""Mixed-precision policy choice and checks for Keras 3 models.

A Keras layer reads the global policy when it is created, so setting it after
the build changes nothing; output layers compute in the low dtype unless told
otherwise; `compile()` adds loss scaling only for a `mixed_float16` model.

Which layers follow the default policy: Keras gives every layer (and model)
created with `dtype=None` the one global `DTypePolicy` object, while an
explicit `dtype="float32"` builds a new one. A layer follows the default when
its policy *is* the model's policy object. A model rebuilt from a config
(`load_model`, `clone_model`) gives each layer its own copy; when no layer
shares the model's object, equal policy *names* count instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from keras_xla import backends
from keras_xla.core import findings as codes
from keras_xla.core.hardware import (
    BF16_CPU_FLAGS,
    DeviceInfo,
    resolve_cpu_flags,
)
from keras_xla.core.report import Finding

logger = logging.getLogger(__name__)

LOW_PRECISION_DTYPES = ("float16", "bfloat16")
APPLY_CALL = (
    "`keras_xla.precision.apply_policy(model, {!r})` and then "
    "`rebuild_step_functions(model)`"
)


@dataclasses.dataclass
class PrecisionFinding(Finding):
    """A precision problem; a `Finding`, so it goes into `XLAReport`."""


def recommend_policy(
    devices: Iterable[Any] | None = None, cpu_flags: Iterable[str] | None = None
) -> tuple[str, str]:
    """The mixed-precision policy this hardware runs best, and why.

    TPU, or GPUs of compute capability 8.0+: `mixed_bfloat16`; 7.x:
    `mixed_float16` (with loss scaling); older GPUs: `float32`. Without
    accelerators, a CPU with `avx512_bf16` or `amx_bf16` gets
    `mixed_bfloat16` (a candidate to measure), any other CPU `float32`.

    Args:
        devices: `DeviceInfo`s or the backend's devices. Defaults to
            this machine's (`backends.device_infos`).
        cpu_flags: CPU feature flags. Defaults to those of /proc/cpuinfo.

    Returns:
        `(policy_name, reason)`.
    """
    infos = backends.device_infos(devices)
    flags = resolve_cpu_flags(cpu_flags)
    gpus = [d for d in infos if d.device_type == "GPU"]
    if any(d.device_type == "TPU" for d in infos):
        return "mixed_bfloat16", "TPU: native bfloat16, no loss scaling"
    if gpus:
        cc = _lowest_capability(gpus)
        if cc is None:
            return "float32", "GPU compute capability unknown"
        gpu = f"GPU compute capability {cc[0]}.{cc[1]}"
        if cc >= (8, 0):
            return "mixed_bfloat16", f"{gpu}: bfloat16 tensor cores"
        if cc >= (7, 0):
            return "mixed_float16", (
                f"{gpu}: float16 tensor cores, no fast bfloat16; train with "
                "loss scaling"
            )
        return "float32", f"{gpu}: no tensor cores, float16 is not faster"
    if flags & BF16_CPU_FLAGS:
        found = "/".join(sorted(flags & BF16_CPU_FLAGS))
        return "mixed_bfloat16", (
            f"CPU with {found}: native bfloat16 matmuls (oneDNN); a "
            "candidate, measure it against float32"
        )
    if not flags:
        return "float32", "no accelerator, CPU flags unreadable"
    return "float32", "CPU without avx512_bf16/amx_bf16: bfloat16 is emulated"


def default_policy_layers(model: Any) -> list[Any]:
    """The layers of `model` that follow its default policy (module doc)."""
    import keras

    reference = model.dtype_policy
    layers = _compute_layers(model)
    shared = [layer for layer in layers if layer.dtype_policy is reference]
    # Deserialized nested models may share it while their layers do not.
    if any(not isinstance(layer, keras.Model) for layer in shared):
        return shared
    return [layer for layer in layers if layer.dtype_policy == reference]


def output_layers(model: Any) -> list[Any]:
    """The layers whose outputs are the model's outputs.

    Operations that are not layers (`keras.ops.softmax(x)` in a functional
    model) are walked back to the layers that feed them; a nested model is
    replaced by its own output layers. A subclassed model has no symbolic
    outputs: its last layer in `model.layers` is taken.
    """
    import keras

    tensors = list(getattr(model, "outputs", None) or [])
    if not tensors:
        return list(model.layers[-1:])
    found: list[Any] = []
    seen: set[int] = set()
    while tensors:
        history = getattr(tensors.pop(), "_keras_history", None)
        if history is None or id(history.operation) in seen:
            continue
        operation = history.operation
        seen.add(id(operation))
        if isinstance(operation, keras.Model):
            found.extend(output_layers(operation))
        elif isinstance(operation, keras.layers.InputLayer):
            continue
        elif isinstance(operation, keras.layers.Layer):
            found.append(operation)
        else:
            node = operation._inbound_nodes[history.node_index]
            tensors.extend(node.input_tensors)
    return found


def apply_policy(model: Any, policy: Any) -> list[str]:
    """Moves a built model's default-policy layers to `policy`.

    The layers that follow the default policy (module docstring) and
    `model.dtype_policy` (read by `compile()`) switch to `policy`; explicit
    per-layer policies stay. Under float16/bfloat16, default-policy output
    layers get `float32`, so losses and metrics see float32. Variables keep
    their dtype. Then call `rebuild_step_functions(model)`.

    Under float16 the optimizer is wrapped in a `LossScaleOptimizer` unless
    it scales the loss already; its slots and step count are kept (a built
    Keras optimizer skips a second `build`), and the compile config follows
    so a saved model reloads with loss scaling. Other policies keep an
    existing LossScaleOptimizer: removing it would drop its scale, explicit
    float16 layers may need it, and otherwise it costs one multiply and a
    finiteness check per step.

    Args:
        model: A built Keras model, compiled or not.
        policy: A float policy name or a `keras.DTypePolicy`.

    Returns:
        The names of the layers whose policy changed.
    """
    import keras

    new = float_policy(policy)
    if not getattr(model, "built", False):
        raise ValueError(
            f"`apply_policy(model={model.name!r}, ...)` needs a built model: "
            "call it once or `model.build(input_shape)` first."
        )
    keep_float32: set[int] = set()
    if new.compute_dtype in LOW_PRECISION_DTYPES:
        keep_float32 = {id(layer) for layer in output_layers(model)}
    float32 = keras.DTypePolicy("float32")
    changed = []
    for layer in default_policy_layers(model):
        target = float32 if id(layer) in keep_float32 else new
        if layer.dtype_policy.name != target.name:
            changed.append(layer.name)
        layer.dtype_policy = target
    model.dtype_policy = new
    if new.compute_dtype == "float16":
        _add_loss_scale(model)
    return changed


def rebuild_step_functions(model: Any) -> None:
    """Rebuilds the train, test and predict functions (new dtypes)."""
    model.make_train_function(force=True)
    model.make_test_function(force=True)
    model.make_predict_function(force=True)


def check_precision(
    model: Any,
    devices: Iterable[Any] | None = None,
    cpu_flags: Iterable[str] | None = None,
) -> list[PrecisionFinding]:
    """Findings about the model's precision setup; empty when it is sound.

    Codes: `policy-set-after-build` (the global policy computes in float16
    or bfloat16 but default-policy layers do not), `low-precision-output`,
    `missing-loss-scale`, `float16-on-cpu`, `bf16-without-hardware-support`.

    Args:
        model: A built Keras model.
        devices: `DeviceInfo`s or the backend's devices. Defaults to
            this machine's (`backends.device_infos`).
        cpu_flags: CPU feature flags. Defaults to those of /proc/cpuinfo.
    """
    import keras

    findings: list[PrecisionFinding] = []

    def add(code: str, message: str, fix: str) -> None:
        findings.append(PrecisionFinding(code, "warning", message, fix))

    infos = backends.device_infos(devices)
    flags = resolve_cpu_flags(cpu_flags)
    kinds = {d.device_type for d in infos}
    best = APPLY_CALL.format(recommend_policy(infos, flags)[0])
    now = keras.config.dtype_policy()
    followers = default_policy_layers(model)
    stale = [x for x in followers if x.compute_dtype != now.compute_dtype]
    if now.compute_dtype in LOW_PRECISION_DTYPES and stale:
        add(
            codes.POLICY_SET_AFTER_BUILD,
            f"The global dtype policy is {now.name!r}, but model "
            f"{model.name!r} runs under {model.dtype_policy.name!r}: "
            f"{_names(stale)} compute in {stale[0].compute_dtype} (a layer "
            "reads the global policy when created, not when run).",
            f"Call {APPLY_CALL.format(now.name)}, or set the policy first.",
        )
    low_out = _computing(output_layers(model), LOW_PRECISION_DTYPES)
    if low_out:
        add(
            codes.LOW_PRECISION_OUTPUT,
            f"Output {_names(low_out)} compute in "
            f"{low_out[0].compute_dtype}: the loss and metrics see it.",
            "Give the output layers `dtype='float32'`, or call "
            f"{APPLY_CALL.format(model.dtype_policy.name)}.",
        )
    layers = _compute_layers(model)
    fp16 = _computing(layers, ("float16",))
    optimizer = getattr(model, "optimizer", None)
    if fp16 and optimizer is not None and not _scales_loss(optimizer):
        add(
            codes.MISSING_LOSS_SCALE,
            f"The {_names(fp16)} compute in float16 without loss "
            "scaling: small gradients underflow to zero.",
            "Wrap the optimizer in `keras.optimizers.LossScaleOptimizer`, "
            f"or call {APPLY_CALL.format('mixed_float16')}.",
        )
    if fp16 and not kinds & {"GPU", "TPU"}:
        add(
            codes.FLOAT16_ON_CPU,
            f"The {_names(fp16)} compute in float16 without a GPU: the CPU "
            "emulates float16, slower than float32.",
            f"Call {best} (the `recommend_policy()` for this machine).",
        )
    bf16 = _computing(layers, ("bfloat16",))
    if bf16 and _bf16_unsupported(infos, flags):
        add(
            codes.BF16_WITHOUT_HARDWARE_SUPPORT,
            f"The {_names(bf16)} compute in bfloat16, which this "
            f"{'GPU' if 'GPU' in kinds else 'CPU'} emulates (native on TPU, "
            "GPU 8.0+, CPU with avx512_bf16/amx_bf16).",
            f"Call {best} (the `recommend_policy()` for this machine).",
        )
    return findings


def _computing(layers: list[Any], dtypes: tuple[str, ...]) -> list[Any]:
    return [layer for layer in layers if layer.compute_dtype in dtypes]


def _lowest_capability(gpus: list[DeviceInfo]) -> tuple[int, int] | None:
    # Every replica runs the same policy, so the weakest GPU decides.
    capabilities = [gpu.compute_capability for gpu in gpus]
    return None if None in capabilities else min(map(tuple, capabilities))


def _bf16_unsupported(infos: list[DeviceInfo], flags: frozenset[str]) -> bool:
    if any(d.device_type == "TPU" for d in infos):
        return False
    gpus = [d for d in infos if d.device_type == "GPU"]
    if gpus:
        capability = _lowest_capability(gpus)
        return capability is not None and capability < (8, 0)
    # Unreadable flags (not Linux): say nothing rather than guess.
    return bool(flags) and not flags & BF16_CPU_FLAGS


def _compute_layers(model: Any) -> list[Any]:
    import keras

    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if not isinstance(layer, keras.layers.InputLayer)
        and layer.quantization_mode is None
    ]


def float_policy(policy: Any, argument: str = "apply_policy(policy") -> Any:
    """`policy` as a float `keras.DTypePolicy`; otherwise a `ValueError`
    that quotes the call, `argument` being its text up to the `=`."""
    import keras

    resolved = None
    with contextlib.suppress(ValueError, TypeError):
        resolved = keras.dtype_policies.get(policy)
    if resolved is None or resolved.quantization_mode is not None:
        raise ValueError(
            f"Unsupported value `{argument}={policy!r})`. Possible "
            "choices are: a float policy name such as 'float32', "
            "'mixed_float16' or 'mixed_bfloat16', or a `keras.DTypePolicy`."
        )
    return resolved


def _scales_loss(optimizer: Any) -> bool:
    import keras

    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or (
        getattr(optimizer, "loss_scale_factor", None) is not None
    )


def _add_loss_scale(model: Any) -> None:
    import keras

    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or _scales_loss(optimizer):
        return
    wrapped = keras.optimizers.LossScaleOptimizer(
        optimizer, name="loss_scale_optimizer"
    )
    if optimizer.built:
        # Build now, in the model's strategy (TensorFlow), next to the
        # inner optimizer's variables (which a second build keeps).
        strategy = getattr(model, "distribute_strategy", None)
        with strategy.scope() if strategy else contextlib.nullcontext():
            wrapped.build(model.trainable_variables)
    set_optimizer(model, wrapped)
    logger.info("Wrapped the optimizer of %r for loss scaling.", model.name)


def set_optimizer(model: Any, optimizer: Any) -> None:
    """Sets `model.optimizer`, in its compile config too, so that a saved
    model reloads with it (a loss-scale wrapper)."""
    model.optimizer = optimizer
    config = getattr(model, "_compile_config", None)
    if "optimizer" in (getattr(config, "config", None) or {}):
        config.config["optimizer"] = optimizer


def _names(layers: list[Any], limit: int = 5) -> str:
    names = ", ".join(repr(layer.name) for layer in layers[:limit])
    more = len(layers) - limit
    return "layers " + names + (f" and {more} more" if more > 0 else "")

"""The live model's configurations: its XLA and precision state, the
trial's candidates, and putting the model in one of them.
"""

from __future__ import annotations

from typing import Any

from keras_xla import backends, xla_setting
from keras_xla import precision as precision_lib
from keras_xla.auto.policy import AUTO, Candidate


class ModelState:
    """A model's precision and XLA settings: layer policies, the model's
    policy, its optimizer (loss scaling), `jit_compile`, and whether
    auto-clustering is on (`set_jit`, process-wide; TensorFlow only)."""

    def __init__(self, model: Any) -> None:
        self.layers = [
            (layer, layer.dtype_policy)
            for layer in model._flatten_layers(include_self=False)
        ]
        self.policy = model.dtype_policy
        self.optimizer = getattr(model, "optimizer", None)
        self.jit = model.jit_compile
        self.set_jit = backends.auto_clustering()

    def restore(self, model: Any) -> None:
        for layer, policy in self.layers:
            if layer.dtype_policy is not policy:
                layer.dtype_policy = policy
        model.dtype_policy = self.policy
        if self.optimizer is not None and model.optimizer is not self.optimizer:
            precision_lib.set_optimizer(model, self.optimizer)
        xla_setting.set_xla(model, self.jit)
        if self.set_jit not in (None, backends.auto_clustering()):
            backends.set_auto_clustering(self.set_jit)


def plan_candidates(
    jit: Any,
    precision: Any,
    xla_possible: bool,
    model: Any,
    clustering: bool = False,
    devices: Any = None,
) -> tuple[list[Candidate], Candidate]:
    """The candidates for the requested `jit` and `precision` ("auto", or
    a fixed value applied to all), and Keras's default configuration
    (`jit_compile="auto"` as Keras resolves it, float32). `xla_possible`
    is `configure_jit`'s verdict for the request (`True` for "auto").
    With `clustering` (the user turned auto-clustering on with `set_jit`
    and it acts here) and `jit="auto"`, auto-clustering is a candidate
    too, between no XLA and `jit_compile`, and no XLA turns it off.
    `devices` are those `recommend_policy` reads (`DeviceInfo`s; by
    default TensorFlow's)."""
    if jit != AUTO:  # configure_jit applied the request where it can work
        modes = [(bool(xla_possible), None)]
    else:
        modes = (
            [(False, False), (False, True)] if clustering else [(False, None)]
        )
        modes += [(True, None)] if xla_possible else []
    current = model.dtype_policy.name
    if precision == AUTO:
        recommended, _ = precision_lib.recommend_policy(devices)
        policies = list(dict.fromkeys(["float32", recommended]))
    else:
        policies = [
            precision_lib.float_policy(precision).name if precision else current
        ]
    candidates = [Candidate(j, p, c) for j, c in modes for p in policies]
    return candidates, Candidate(xla_setting.keras_auto_jit(model), "float32")


def configure(model: Any, original: ModelState, candidate: Candidate):
    """Puts `model` in `candidate`'s configuration, from `original`."""
    original.restore(model)
    if candidate.policy != model.dtype_policy.name:
        precision_lib.apply_policy(model, candidate.policy)
    xla_setting.set_xla(model, candidate.jit)
    if candidate.clustering is not None:
        backends.set_auto_clustering(candidate.clustering)

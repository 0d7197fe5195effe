"""A model's probed train and test functions, one per configuration.

Keras builds `model.train_function` once per `compile()`. The tuner needs
the step to carry the shape probe, and needs one function per
configuration (XLA on or off, steps per execution, precision): the trial
switches between them, and a second `fit` with the same settings must
reuse the compiled step instead of compiling it again. `StepFunctions`
keeps these variants on the model, each with the probe its step records
into and the signatures it has compiled.

In a fit that builds both (a trial, the baseline window), variants that
differ only in XLA (same precision, same steps per call) share one traced
train step and its probe: Keras's step function calls that `tf.function`,
so a variant built after another skips the Python trace of the step, XLA
still compiles the whole step through the call, and without XLA the call
costs nothing measurable per step. Tracing inside the nested `tf.function`
makes the first variant's first call longer, about what the XLA twin saves
on a small model; so a fit that builds one way only traces as Keras does
(BENCHMARKS.md, "The shared train step"). The probe is shared because the
traced step records into it; each variant keeps its own compiled
signatures.

A fit may wrap the installed function (the unsupported-op guard); the
wrapper is that fit's, so `unwrap()` puts the bare function back when the
fit ends and nothing on the model keeps the fit alive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from keras_xla.core.signatures import SignatureTracker
from keras_xla.tf_backend import input_wait
from keras_xla.tf_backend.probe import RING_CALLS, ShapeProbe, install_probe

FUNCTIONS = ("train", "test")
Wrap = Callable[[str, Any], Any]


class Config(NamedTuple):
    """What a step function is built for: XLA on or off (`jit_compile`),
    `steps_per_execution` and the model's dtype policy name."""

    xla: bool
    steps_per_call: int
    policy: str


@dataclasses.dataclass(eq=False)
class _Family:
    """What the variants of one precision and steps per call share: the
    probe their step records into, the traced step (None: each variant
    traces its own) and the stamps of the train calls' wait for their
    batch (None where they are not stamped)."""

    probe: ShapeProbe
    step: Any
    stamps: input_wait.InputStamps | None = None


@dataclasses.dataclass(eq=False)
class Variant:
    """One built step function, with its probe and compiled signatures.

    Attributes:
        fn: The function Keras built (probed, not wrapped).
        probe: The shape probe its step records into (shared with the
            variants of the same precision and steps per call).
        config: The configuration it was built for (a `Config`).
        tracker: The signatures it has compiled.
        hlo_results: HLO statistics per steady signature, computed once.
        installed: What is on the model now: `fn` or a fit's wrapper.
        called: Whether a call of it was recorded since it was built.
    """

    fn: Any
    probe: ShapeProbe
    config: tuple
    tracker: SignatureTracker = dataclasses.field(
        default_factory=SignatureTracker
    )
    hlo_results: dict = dataclasses.field(default_factory=dict)
    installed: Any = None
    called: bool = False


class StepFunctions:
    """One model's probed step functions, kept on the model across fits.

    A step function is rebuilt only when its configuration really changes
    or Keras rebuilt it (after `compile()`); switching back to a
    configuration reuses its compiled step.

    Attributes:
        share: Whether variants that differ only in XLA share one traced
            step (see the module docstring): None (the default) where the
            fit says it builds both (`prepare(share=True)`); True or False
            to measure what sharing saves.
    """

    ATTR = "_keras_xla_step_functions"

    def __init__(self) -> None:
        # The probe each function's step records into, looked up when the
        # step is traced.
        self.holder: dict[str, ShapeProbe | None] = {}
        self.share: bool | None = None
        self._variants: dict[str, dict[tuple, Variant]] = {}
        self._families: dict[tuple, _Family] = {}
        self._active: dict[str, Variant] = {}

    @classmethod
    def of(cls, model: Any) -> StepFunctions:
        functions = model.__dict__.get(cls.ATTR)
        if functions is None:
            functions = cls()
            # Bypass Keras's attribute tracking: this is not a layer.
            object.__setattr__(model, cls.ATTR, functions)
        return functions

    def prepare(
        self,
        model: Any,
        function: str,
        config: Config,
        wrap: Wrap | None,
        share: bool = False,
    ) -> None:
        """Makes `model.<function>_function` the probed function of
        `config`, wrapped by `wrap(function, fn)` if given; builds it
        unless that configuration's function exists (`share`: this fit
        builds its XLA twin too, so a new one calls a shared traced
        step)."""
        attr = f"{function}_function"
        active = self._active.get(function)
        current = getattr(model, attr, None)
        if active is None or (
            current is not active.fn and current is not active.installed
        ):
            # Keras built or dropped the function itself (compile()).
            self._variants[function] = {}
            self._families = {
                k: f for k, f in self._families.items() if k[0] != function
            }
        variants = self._variants.setdefault(function, {})
        variant = variants.get(config)
        if variant is None:
            variant = self._build(model, function, config, share)
            variants[config] = variant
        variant.installed = wrap(function, variant.fn) if wrap else variant.fn
        setattr(model, attr, variant.installed)
        self.holder[function] = variant.probe
        self._active[function] = variant

    def _build(
        self, model: Any, function: str, config: Config, share: bool
    ) -> Variant:
        """Builds `config`'s variant of `model.<function>_function`."""
        native = getattr(model, "_keras_xla_native_probe", False)
        if not native:
            install_probe(model, function, self.holder)
        key = (function, config.steps_per_call, config.policy)
        family = self._families.get(key)
        if family is None:
            stamps = None
            if _stamped(model, function, config):
                stamps = input_wait.InputStamps()
            probe = ShapeProbe(
                function,
                slots=RING_CALLS * config.steps_per_call,
                strategy=model.distribute_strategy,
                stamps=stamps,
            )
            share = share if self.share is None else self.share
            step = None
            if share and not native and not model.run_eagerly:
                # Like Keras's own, the traced step relaxes shapes that
                # change and is not converted with AutoGraph.
                step = tf.function(
                    getattr(model, f"{function}_step"),
                    reduce_retracing=True,
                    autograph=False,
                )
            family = self._families[key] = _Family(probe, step, stamps)
        self.holder[function] = family.probe
        make = getattr(model, f"make_{function}_function")

        def build() -> None:
            if family.stamps is None:
                make(force=True)
            else:
                input_wait.install(
                    model, lambda: make(force=True), family.stamps
                )

        if family.step is None:
            build()
        else:
            # Keras builds the function around `model.<function>_step`.
            attr = f"{function}_step"
            probed = model.__dict__[attr]
            object.__setattr__(model, attr, family.step)
            try:
                build()
            finally:
                object.__setattr__(model, attr, probed)
        return Variant(
            getattr(model, f"{function}_function"), family.probe, config
        )

    def active(self, function: str) -> Variant | None:
        """The variant on the model now, or None before `prepare`."""
        return self._active.get(function)

    def probe(self, function: str) -> ShapeProbe | None:
        return self.holder.get(function)

    def unwrap(self, model: Any) -> None:
        """Puts each active variant's bare function back on the model."""
        for function, variant in self._active.items():
            attr = f"{function}_function"
            if getattr(model, attr, None) is variant.installed:
                setattr(model, attr, variant.fn)
            variant.installed = variant.fn


def probe_of(model: Any, function: str) -> ShapeProbe | None:
    """The probe `model`'s `function` step records into now, if any."""
    functions = model.__dict__.get(StepFunctions.ATTR)
    return functions.probe(function) if functions is not None else None


def _stamped(model: Any, function: str, config: Config) -> bool:
    """Whether `config`'s train function fetches each batch right before
    its step, where the wait for it can be stamped: one step per call,
    traced, on one replica."""
    return (
        function == "train"
        and config.steps_per_call == 1
        and not model.run_eagerly
        and model.distribute_strategy.num_replicas_in_sync == 1
    )

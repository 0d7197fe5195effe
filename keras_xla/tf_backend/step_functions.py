"""A model's probed train and test functions, one per configuration.

Keras builds `model.train_function` once per `compile()`. The tuner needs
the step to carry the shape probe, and needs one function per
configuration (XLA on or off, steps per execution, precision): the trial
switches between them, and a second `fit` with the same settings must
reuse the compiled step instead of compiling it again. `StepFunctions`
keeps these variants on the model, each with its own probe and the
signatures it has compiled.

A fit may wrap the installed function (the unsupported-op guard); the
wrapper is that fit's, so `unwrap()` puts the bare function back when the
fit ends and nothing on the model keeps the fit alive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from keras_xla.core.signatures import SignatureTracker
from keras_xla.tf_backend.probe import RING_CALLS, ShapeProbe, install_probe

FUNCTIONS = ("train", "test")
Wrap = Callable[[str, Any], Any]


@dataclasses.dataclass(eq=False)
class Variant:
    """One built step function, with its probe and compiled signatures.

    Attributes:
        fn: The function Keras built (probed, not wrapped).
        probe: The shape probe its step records into.
        config: The configuration it was built for.
        tracker: The signatures it has compiled.
        hlo_results: HLO statistics per steady signature, computed once.
        installed: What is on the model now: `fn` or a fit's wrapper.
    """

    fn: Any
    probe: ShapeProbe
    config: tuple
    tracker: SignatureTracker = dataclasses.field(
        default_factory=SignatureTracker
    )
    hlo_results: dict = dataclasses.field(default_factory=dict)
    installed: Any = None


class StepFunctions:
    """One model's probed step functions, kept on the model across fits.

    A step function is rebuilt only when its configuration really changes
    or Keras rebuilt it (after `compile()`); switching back to a
    configuration reuses its compiled step.
    """

    ATTR = "_keras_xla_step_functions"

    def __init__(self) -> None:
        # The probe each function's step records into, looked up when the
        # step is traced.
        self.holder: dict[str, ShapeProbe | None] = {}
        self._variants: dict[str, dict[tuple, Variant]] = {}
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
        self, model: Any, function: str, config: tuple, wrap: Wrap | None
    ) -> bool:
        """Makes `model.<function>_function` the probed function of
        `config`, wrapped by `wrap(function, fn)` if given; builds it
        unless that configuration's function exists. Returns True if it
        was built."""
        attr = f"{function}_function"
        active = self._active.get(function)
        current = getattr(model, attr, None)
        if active is None or (
            current is not active.fn and current is not active.installed
        ):
            # Keras built or dropped the function itself (compile()).
            self._variants[function] = {}
        variants = self._variants.setdefault(function, {})
        variant = variants.get(config)
        built = variant is None
        if built:
            if not getattr(model, "_keras_xla_native_probe", False):
                install_probe(model, function, self.holder)
            probe = ShapeProbe(
                function,
                slots=RING_CALLS * int(model.steps_per_execution or 1),
                strategy=model.distribute_strategy,
            )
            self.holder[function] = probe
            getattr(model, f"make_{function}_function")(force=True)
            variant = Variant(getattr(model, attr), probe, config)
            variants[config] = variant
        variant.installed = wrap(function, variant.fn) if wrap else variant.fn
        setattr(model, attr, variant.installed)
        self.holder[function] = variant.probe
        self._active[function] = variant
        return built

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

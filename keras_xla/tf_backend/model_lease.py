"""What a fit under the tuner borrows of the model, and gives back.

For the length of one fit the tuner may change the model's settings (XLA,
the precision policy, auto-clustering: one `ModelState`), and it watches
Keras's own calls between the hooks, so that a failure there ends the fit
as interrupted. `ModelLease` takes the model as the fit found it and puts
it back: the settings (unless the user keeps the tuner's), the predict
function Keras would use with them, and the watched calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keras_xla.auto.model_state import ModelState
from keras_xla.core.interrupts import on_error

# Keras's own calls between the hooks of a fit (the epoch's metrics, the
# validation run, resetting the metrics): if one raises, the fit is over
# and Keras calls no hook to say so.
BETWEEN_HOOKS = ("reset_metrics", "_get_metrics_result_or_logs", "evaluate")
_ABSENT = object()


class ModelLease:
    """The model being fit, as the fit found it (before the tuner's
    changes)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.user = ModelState(model)
        self._predict = getattr(model, "predict_function", None)
        self._watched: dict[str, Any] = {}

    def watch(self, interrupted: Callable[[], Any]) -> None:
        """Keras's calls between the hooks (`BETWEEN_HOOKS`) call
        `interrupted` if they raise, until `unwatch`."""
        model = self.model
        for name in BETWEEN_HOOKS:
            method = getattr(model, name, None)
            if method is None:
                continue
            self._watched[name] = model.__dict__.get(name, _ABSENT)
            watched = on_error(method, interrupted)
            # Bypass Keras's attribute tracking: a plain function.
            object.__setattr__(model, name, watched)

    def unwatch(self) -> None:
        model, watched, self._watched = self.model, self._watched, {}
        for name, before in watched.items():
            if before is _ABSENT:
                model.__dict__.pop(name, None)
            else:
                object.__setattr__(model, name, before)

    def restore(self) -> None:
        """The user's settings as the fit found them, and the predict
        function Keras would use with them (one built during the fit, by
        a callback's predict, has the tuner's XLA setting)."""
        model = self.model
        jit_during = bool(model.jit_compile)
        self.user.restore(model)
        rebuilt = getattr(model, "predict_function", None) is not self._predict
        if rebuilt and jit_during != bool(model.jit_compile):
            model.predict_function = self._predict

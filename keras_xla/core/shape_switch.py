"""The per-shape fallback: after a recompilation storm, XLA's step for
the shapes it compiled, the step without XLA for every other.

`XLATuner(on_recompile_storm="per_shape")`. PyTorch answers a shape
storm the same way (`set_stance("eager_on_recompile")`): a shape the
compiled step knows runs its program; a new one runs without compiling.
XLA has no symbolic shapes, so the test is exact: the batch's shapes
(`guard.shapes_key`) against the set the XLA step compiled when the
guard acted, per step function. That set does not grow: a new shape
never compiles from then on.

Each backend puts the switch between Keras's loop and its two step
functions (`dispatch`): it takes the call's one batch from Keras's
iterator, asks `uses_xla` and hands the batch on to the chosen
function. One batch per call: with `steps_per_execution > 1` a call's
batches could need both sides, and the guard falls back instead.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keras_xla.core.batch_paths import flatten_with_paths
from keras_xla.core.guard import shapes_key


def batch_key(data: Any) -> tuple:
    """A batch's shapes as `guard.shapes_key` writes a signature's."""
    pairs = flatten_with_paths(data)
    return shapes_key({path: [int(d) for d in a.shape] for path, a in pairs})


def signature_key(signature: Any) -> tuple:
    """A `Signature`'s shapes as `guard.shapes_key` writes them."""
    return shapes_key({t.path: list(t.shape) for t in signature.tensors})


class ShapeSwitch:
    """Which of a step function's batches XLA's program runs.

    Args:
        compiled: Per step function (`"train"`, `"test"`), the
            `shapes_key`s its XLA step had compiled when the guard acted.
    """

    def __init__(self, compiled: dict[str, set[tuple]]) -> None:
        self.compiled = compiled

    def uses_xla(self, function: str, data: Any) -> bool:
        return batch_key(data) in self.compiled.get(function, ())

    def knows(self, function: str, signature: Any) -> bool:
        """Whether a step of `signature` (a `Signature`) ran XLA's step."""
        return signature_key(signature) in self.compiled.get(function, ())

    def dispatch(
        self,
        function: str,
        take: Callable[[], Any],
        xla: Callable[[Any], Any],
        plain: Callable[[Any], Any],
    ) -> Any:
        """One call: the batch `take()` returns (its `StopIteration` is
        Keras's end of data) runs `xla(batch)` where XLA compiled its
        shapes, else `plain(batch)`."""
        data = take()
        return (xla if self.uses_xla(function, data) else plain)(data)

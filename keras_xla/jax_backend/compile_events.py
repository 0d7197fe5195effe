"""XLA's compilations on JAX, as JAX itself reports them.

JAX records `/jax/core/compile/backend_compile_duration` once per XLA
compilation, with the jitted function's name (`fun_name`, e.g.
`jit(train_step)`) and the seconds it took, synchronously on the thread
that called the function. A persistent-cache hit fires
`/jax/compilation_cache/cache_hits` first and then that event too (the
seconds of loading the executable): it is told apart here, and is not a
compilation. `CompileEvents` listens for one fit: installed at its
start, removed at its end, and inert once removed even if JAX keeps a
reference.
"""

from __future__ import annotations

import dataclasses
import time

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# The Keras step functions whose compilations are counted, by JAX's name.
STEP_NAMES = {"jit(train_step)": "train", "jit(test_step)": "test"}


@dataclasses.dataclass(frozen=True)
class CompileEvent:
    """One compilation of a step function (`"train"` or `"test"`), or a
    persistent-cache hit (no compilation): JAX's measured seconds (for a
    hit: loading it), and `time.perf_counter()` when JAX reported it."""

    function: str
    seconds: float
    at: float
    cache_hit: bool = False


class CompileEvents:
    """Collects the step functions' compile events between `install()`
    and `remove()`; `take` hands them over."""

    def __init__(self) -> None:
        self._events: dict[str, list[CompileEvent]] = {"train": [], "test": []}
        self._hit_pending = False
        self._installed = False
        self.other_compilations = 0  # primitives, Keras's own helpers
        self.other_seconds = 0.0

    def install(self) -> None:
        """Registers the listeners with `jax.monitoring`."""
        if self._installed:
            return
        from jax import monitoring

        monitoring.register_event_listener(self._on_event)
        monitoring.register_event_duration_secs_listener(self._on_duration)
        self._installed = True

    def remove(self) -> None:
        """Unregisters the listeners; they are inert from now on even if
        unregistering failed."""
        if not self._installed:
            return
        self._installed = False
        from jax import monitoring

        for unregister, listener in (
            (monitoring.unregister_event_listener, self._on_event),
            (monitoring.unregister_event_duration_listener, self._on_duration),
        ):
            try:
                unregister(listener)
            except (AssertionError, ValueError):
                pass  # already gone: the listener is inert anyway

    def _on_event(self, event: str, **kwargs) -> None:
        if self._installed and event == CACHE_HIT_EVENT:
            self._hit_pending = True

    def _on_duration(self, event: str, seconds: float, **kwargs) -> None:
        if not self._installed or event != COMPILE_EVENT:
            return
        hit, self._hit_pending = self._hit_pending, False
        function = STEP_NAMES.get(str(kwargs.get("fun_name", "")))
        if function is None:
            if not hit:
                self.other_compilations += 1
                self.other_seconds += float(seconds)
            return
        self._events[function].append(
            CompileEvent(function, float(seconds), time.perf_counter(), hit)
        )

    def take(self, function: str) -> list[CompileEvent]:
        """`function`'s events since the last `take`, oldest first."""
        events, self._events[function] = self._events[function], []
        return events

    def pending(self, function: str) -> int:
        """How many events of `function` wait to be taken."""
        return len(self._events[function])

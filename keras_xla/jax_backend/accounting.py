"""Epoch accounting with JAX's own compile seconds.

`core.accounting.Accountant` estimates a compilation's seconds from its
call's excess over the steady step. On JAX the seconds are measured (the
compile events), so this accountant uses them: for the length of one
`finish_run`, the estimate is the call's measured seconds shared by its
compilations. Everything else (statistics, explanations, findings) is
the core's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from keras_xla.core import accounting as core_accounting
from keras_xla.core.accounting import Accountant
from keras_xla.core.timing import StepRecord


def measured_compile_seconds(
    record: StepRecord, median_seconds: float | None, graph: float = 0.0
) -> float:
    """`core.timing.estimate_compile_seconds`'s contract, from what JAX
    measured: the call's compile seconds shared by its compilations; a
    record without measurements gets the core's estimate."""
    measured = getattr(record, "measured", None)
    if not record.compiled:
        return 0.0
    if not measured:
        return _ESTIMATE(record, median_seconds, graph)
    return sum(measured) / len(record.new)


_ESTIMATE = core_accounting.estimate_compile_seconds


@contextlib.contextmanager
def _measured() -> Iterator[None]:
    before = core_accounting.estimate_compile_seconds
    core_accounting.estimate_compile_seconds = measured_compile_seconds
    try:
        yield
    finally:
        core_accounting.estimate_compile_seconds = before


class MeasuredAccountant(Accountant):
    """An `Accountant` whose compile seconds are JAX's measurements."""

    def finish_run(self, function, records, train_so_far=()) -> dict:
        with _measured():
            return super().finish_run(function, records, train_so_far)

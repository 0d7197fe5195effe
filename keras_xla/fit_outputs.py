"""A fit's outputs: the report JSON, then TensorBoard, each failing on
its own into an `output-failed` finding (only `strict=True` raises).
The JSON goes first: it is what must survive a crash.
"""

from __future__ import annotations

from typing import Any

from keras_xla.core import findings as codes
from keras_xla.tf_backend.summaries import SummaryWriter, write_epoch


class FitOutputs:
    """Writes one fit's outputs to `settings.log_dir` (nothing if None).

    Args:
        settings: The tuner's checked arguments.
        report: The fit's `XLAReport`.
        book: The fit's `FindingBook`.
    """

    def __init__(self, settings: Any, report: Any, book: Any) -> None:
        self.settings, self.report, self.book = settings, report, book
        self.log_dir = settings.log_dir
        self.writer = SummaryWriter(self.log_dir) if self.log_dir else None
        self.decided = False  # a decision to write at this epoch's end
        self.steps_done = 0  # train steps of the epochs before

    def safely(self, what: str, fn, *args) -> None:
        """`fn(*args)`; a failure becomes an `output-failed` finding."""
        try:
            fn(*args)
        except Exception as error:  # noqa: BLE001 - never stop training
            if self.settings.strict:
                raise
            self.book.add(
                codes.OUTPUT_FAILED,
                f"{what} failed: {type(error).__name__}: {error}",
                f"Make log_dir={self.log_dir!r} a writable directory (its "
                "train/ too); the other outputs were written.",
                (what,),
            )

    def write(self, stats=None, records=()) -> None:
        """The JSON, then TensorBoard: the epoch of `stats`, or (None)
        closing the writer at train end."""
        if not self.log_dir:
            return
        self.safely("the report JSON", self.report.write, self.log_dir)
        if stats is None:
            self.safely("TensorBoard summaries", self.writer.close)
            return
        args = (stats, self.report, self.decided, records, self.steps_done)
        self.safely("TensorBoard summaries", write_epoch, self.writer, *args)
        self.decided = False
        self.steps_done += stats.steps

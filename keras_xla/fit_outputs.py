"""A fit's outputs: the report JSON, then TensorBoard, then the larger
files (the HLO module), each failing on its own into an `output-failed`
finding (only `strict=True` raises). The JSON goes first: it is what
must survive a crash or a full disk. Files the epoch's checks write
(`core.files.write_later`) wait until the JSON is written; every file is
written whole (`core.files.write_whole`), so a full disk leaves neither
a truncated file nor a temporary one.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from keras_xla.core import files
from keras_xla.core import findings as codes
from keras_xla.core.report import REPORT_FILENAME
from keras_xla.core.summaries import JOB_TAG, EventWriter, write_epoch


class FitOutputs:
    """Writes one fit's outputs to `settings.log_dir` (nothing if None):
    its `XLAReport`, and failures into its `FindingBook`."""

    def __init__(self, settings: Any, report: Any, book: Any) -> None:
        self.settings, self.report, self.book = settings, report, book
        self.log_dir = settings.log_dir
        self.writer = EventWriter(self.log_dir) if self.log_dir else None
        self.decided = False  # a decision to write at this epoch's end
        self.steps_done = 0  # train steps of the epochs before
        self.pending: list[tuple[str, bytes | str]] = []  # after the JSON

    def safely(self, what: str, fn, *args) -> bool:
        """`fn(*args)`, holding the files it writes for `write`; a failure
        becomes an `output-failed` finding. Returns whether it worked."""
        try:
            with files.deferring(self.pending):
                fn(*args)
            return True
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
            return False

    def write(self, stats=None, records=()) -> None:
        """The JSON, then TensorBoard: the epoch of `stats`, or (None)
        closing the writer at train end; then the files held back."""
        if not self.log_dir:
            self.pending.clear()
            return
        self.safely("the report JSON", self.report.write, self.log_dir)
        if stats is None:
            self.safely("TensorBoard summaries", self.writer.close)
        else:
            args = (stats, self.report, self.decided, records, self.steps_done)
            self.safely(
                "TensorBoard summaries", write_epoch, self.writer, *args
            )
            self.decided = False
            self.steps_done += stats.steps
        self._write_pending()

    def write_job(self, step: int, job_json: str) -> None:
        """The job's report (the chief's), into this run's TensorBoard
        events for the XLA tab; before `write()` closes the writer."""
        if self.writer is not None:
            what = "the job report's TensorBoard tensor"
            self.safely(what, self.writer.write_report, step, job_json, JOB_TAG)

    def _write_pending(self) -> None:
        """The files held back, after the JSON; one that fails is named
        no more by the report, whose JSON is written again to say so."""
        pending, self.pending = self.pending, []
        failed = [
            path
            for path, data in pending
            if not self.safely(
                f"writing {path}", files.write_into_own_directory, path, data
            )
        ]
        hlo = self.report.hlo
        if hlo is not None and hlo.module in failed:
            hlo.module = None
        if hlo is not None and hlo.text in failed:
            hlo.text = None
        if failed:
            self.safely("the report JSON", self.report.write, self.log_dir)


def claim_log_dir(
    log_dir: str | None,
) -> tuple[int | None, str | None, tuple[str, str] | None]:
    """Holds `log_dir` for one fit. Where another process's fit holds it,
    this fit writes to a folder of its own in it (`<host>-<pid>`), and
    the `log-dir-shared` finding's `(message, fix)` says so. Returns the
    lock (for `core.files.release`), the log dir to write to, and that
    finding or None. A folder that cannot be made is left to the
    outputs, which say what failed."""
    if not log_dir:
        return None, log_dir, None
    try:
        files.own_directory(log_dir)
        held = files.hold(os.path.join(log_dir, REPORT_FILENAME))
        if held is not None:
            return held, log_dir, None
        mine = os.path.join(log_dir, f"{socket.gethostname()}-{os.getpid()}")
        files.own_directory(mine)
        held = files.hold(os.path.join(mine, REPORT_FILENAME))
    except OSError:
        return None, log_dir, None
    message = (
        f"Another process's fit is writing its report into "
        f"log_dir={log_dir!r}; this fit's report and TensorBoard run "
        f"went to {mine!r}, so neither overwrites the other."
    )
    fix = "Give each run its own log_dir (a sweep: one folder per run)."
    return held, mine, (message, fix)

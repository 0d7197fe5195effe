"""What the tuner writes to TensorBoard: per-epoch `xla/` scalars and text
summaries, and the report's JSON for the "XLA" tab (`keras_xla.dashboard`).

Events go to `<log_dir>/train`, the run directory that
`keras.callbacks.TensorBoard` uses for training scalars, with the epoch as
the step, so both callbacks show side by side when given one `log_dir`.
The tags and what an epoch writes (`write_epoch`) are the same on every
backend; only the event writer is the backend's own (an `EventWriter`:
`tf_backend.summaries.SummaryWriter` through `tf.summary`,
`jax_backend.summaries.JaxSummaryWriter` through TensorBoard's event file
writer, without TensorFlow).

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import os
from typing import Any

from keras_xla.core import figures, render

# Scalar tags, one point per epoch: the figures of `core.figures`, by
# when they are written.
SCALAR_TAGS = figures.tags(figures.EVERY_EPOCH)
HLO_TAGS = figures.tags(figures.AFTER_HLO)
CACHE_TAGS = figures.tags(figures.WITH_CACHE)
APART_TAGS = figures.tags(figures.APART)
WAIT_TAGS = figures.tags(figures.WAIT_SEEN)
FINDINGS_TAG = "xla/findings"
DECISION_TAG = "xla/decision"
VERDICT_TAG = "xla/verdict"
# One point per train call, step = global train step: a recompilation
# shows as a spike.
STEP_TIME_TAG = "xla/step_time_ms"
# The report's JSON, one string tensor per epoch, for the "XLA" tab: its
# summary metadata names the tab's plugin and what the tensor holds.
REPORT_TAG = "xla/report"
# The job's report (`core.job`), in the chief's run, at its last epoch.
JOB_TAG = "xla/job"
# `keras-xla run --compare`'s table and answer, in its own run
# (`<log-dir>/comparison`), once.
COMPARE_TAG = "xla/compare"
COMPARISON_RUN = "comparison"
PLUGIN_NAME = "xla"
REPORT_CONTENT = b"keras_xla.report/1"
TRAIN_RUN = "train"


def epoch_scalars(stats, hlo: dict | None = None) -> dict[str, float]:
    """The scalars of one epoch (an `EpochStats`; `hlo`, the report's
    section): each registered figure that has a value
    (`figures.scalars`). They also go into Keras's `logs`."""
    return figures.scalars(stats, hlo)


class EventWriter:
    """A lazily created event writer for the tuner's summaries; a backend
    supplies `_open` and the four `write_*` methods.

    Args:
        log_dir: The TensorBoard log directory (the one passed to
            `keras.callbacks.TensorBoard`); events go to its `train` run.
    """

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self._writer = None
        self._last_text: dict[str, str] = {}

    @property
    def run_dir(self) -> str:
        return os.path.join(self.log_dir, TRAIN_RUN)

    def _open(self) -> Any:
        """The backend's writer for `run_dir` (with `flush` and `close`)."""
        raise NotImplementedError

    def _get(self) -> Any:
        if self._writer is None:
            self._writer = self._open()
        return self._writer

    def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Writes each `tag: value` at `step`; `None` values are skipped."""
        raise NotImplementedError

    def write_step_times(self, points: list[tuple[int, float]]) -> None:
        """`STEP_TIME_TAG` at each `(global step, ms)`, in one go."""
        raise NotImplementedError

    def write_report(
        self, step: int, report_json: str, tag: str = REPORT_TAG
    ) -> None:
        """The report's JSON at `step` (the epoch), under `tag`
        (`REPORT_TAG`; the chief's job report: `JOB_TAG`) with the
        dashboard plugin's name, so the "XLA" tab reads it."""
        raise NotImplementedError

    def write_text(self, step: int, tag: str, text: str) -> None:
        """`text` (Markdown) under `tag` at `step`."""
        raise NotImplementedError

    def write_text_if_changed(self, step: int, tag: str, text: str) -> None:
        """`write_text`, unless `tag` already shows this text."""
        if self._last_text.get(tag) != text:
            self._last_text[tag] = text
            self.write_text(step, tag, text)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_epoch(
    writer: EventWriter,
    stats,
    report,
    decided: bool,
    records=(),
    first_step: int = 0,
) -> None:
    """One epoch: its scalars, each train call's step time (`records`, at
    global step `first_step + record.first_step`), the findings table and
    the verdict when they changed, and, when the trial just `decided`,
    its decision; then the report's JSON for the "XLA" tab; then
    flushes."""
    writer.write_scalars(stats.epoch, epoch_scalars(stats, report.hlo))
    writer.write_step_times(
        [
            (first_step + r.first_step, r.seconds_per_step * 1000.0)
            for r in records
        ]
    )
    text = render.findings_markdown(report.findings)
    writer.write_text_if_changed(stats.epoch, FINDINGS_TAG, text)
    if report.verdict is not None:
        text = render.verdict_markdown(report.verdict, report.baseline)
        writer.write_text_if_changed(stats.epoch, VERDICT_TAG, text)
    if decided:
        text = render.decision_markdown(report.decision)
        writer.write_text(stats.epoch, DECISION_TAG, text)
    writer.write_report(stats.epoch, report.to_json())
    writer.flush()

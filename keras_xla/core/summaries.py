"""What the tuner writes to TensorBoard: per-epoch `xla/` scalars and text
summaries, and the report's JSON for the "XLA" tab (`keras_xla.dashboard`).

Events go to `<log_dir>/train`, the run directory that
`keras.callbacks.TensorBoard` uses for training scalars, with the epoch as
the step, so both callbacks show side by side when given one `log_dir`.
The tags, what an epoch writes (`write_epoch`) and the writer
(`EventWriter`, TensorBoard's protos in an `event_file.EventFile`) are
the same on every backend.

Nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from keras_xla.core import figures, render
from keras_xla.core.event_file import EventFile

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


class EventWriter:
    """A lazily created event writer for the tuner's summaries.

    Args:
        log_dir: The TensorBoard log directory (the one passed to
            `keras.callbacks.TensorBoard`).
        run: The run under it the events go to. Defaults to `"train"`.
    """

    def __init__(self, log_dir: str, run: str = TRAIN_RUN) -> None:
        self.run_dir = os.path.join(log_dir, run)
        self._writer: EventFile | None = None
        self._last_text: dict[str, str] = {}

    def _write(self, step: int, values: list[tuple[str, Any, Any]]) -> None:
        """One event at `step` of `(tag, array, summary metadata)` values."""
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.util import tensor_util

        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(
                    tag=tag,
                    tensor=tensor_util.make_tensor_proto(array),
                    metadata=meta,
                )
                for tag, array, meta in values
            ]
        )
        if self._writer is None:
            self._writer = EventFile(self.run_dir)
        event = event_pb2.Event(step=int(step), summary=summary)
        event.wall_time = time.time()
        self._writer.add_event(event)

    @staticmethod
    def _metadata(plugin: str) -> Any:
        """Summary metadata for TensorBoard's `scalar` or `text` plugin."""
        module = importlib.import_module(
            f"tensorboard.plugins.{plugin}.metadata"
        )
        return module.create_summary_metadata(display_name="", description="")

    def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Writes each `tag: value` at `step`; `None` values are skipped."""
        meta = self._metadata("scalar")
        values = [
            (tag, np.array(float(value), np.float32), meta)
            for tag, value in scalars.items()
            if value is not None
        ]
        if values:
            self._write(step, values)

    def write_step_times(self, points: Iterable[tuple[int, float]]) -> None:
        """`STEP_TIME_TAG` at each `(global step, ms)`, in one go."""
        meta = self._metadata("scalar")
        for step, value in points:
            array = np.array(float(value), np.float32)
            self._write(step, [(STEP_TIME_TAG, array, meta)])

    def write_report(
        self, step: int, report_json: str, tag: str = REPORT_TAG
    ) -> None:
        """The report's JSON at `step` (the epoch), under `tag`
        (`REPORT_TAG`; the chief's job report: `JOB_TAG`) with the
        dashboard plugin's name, so the "XLA" tab reads it."""
        from tensorboard.compat.proto import summary_pb2

        meta = summary_pb2.SummaryMetadata.FromString(summary_metadata())
        array = np.array(report_json.encode("utf-8"), dtype=object)
        self._write(step, [(tag, array, meta)])

    def write_text(self, step: int, tag: str, text: str) -> None:
        """`text` (Markdown) under `tag` at `step`."""
        meta = self._metadata("text")
        array = np.array(text.encode("utf-8"), dtype=object)
        self._write(step, [(tag, array, meta)])

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


def summary_metadata() -> bytes:
    """The report tensor's serialized `SummaryMetadata`: the XLA tab's
    plugin name, a tensor of one string."""
    from tensorboard.compat.proto import summary_pb2

    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=REPORT_CONTENT
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    ).SerializeToString()


def write_epoch(
    writer: EventWriter,
    stats,
    report,
    decided: bool,
    records=(),
    first_step: int = 0,
) -> None:
    """One epoch's summaries (the decision's when the trial just
    `decided`), then the report's JSON for the "XLA" tab; then flushes."""
    writer.write_scalars(stats.epoch, figures.scalars(stats, report.hlo))
    writer.write_step_times(
        (first_step + r.first_step, r.seconds_per_step * 1000.0)
        for r in records
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

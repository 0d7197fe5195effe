"""TensorBoard writing without TensorFlow, for the JAX backend.

The same events as `tf_backend.summaries.SummaryWriter` (the same tags,
the report's JSON tensor for the "XLA" tab under the dashboard plugin's
metadata), written with TensorBoard's own event file writer, so the run
directory reads the same to TensorBoard and to `keras_xla.dashboard`.
`core.summaries.write_epoch` drives either writer.
"""

from __future__ import annotations

import time

import numpy as np

from keras_xla.core.summaries import STEP_TIME_TAG, EventWriter
from keras_xla.dashboard import metadata


class JaxSummaryWriter(EventWriter):
    """Lazily created event writer for the tuner's summaries.

    Args:
        log_dir: The TensorBoard log directory; events go to its `train`
            run, as `keras.callbacks.TensorBoard`'s training scalars do.
    """

    def _open(self):
        from tensorboard.summary.writer.event_file_writer import (
            EventFileWriter,
        )

        return EventFileWriter(self.run_dir)

    def _write(self, step: int, values: list) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        self._get().add_event(
            event_pb2.Event(
                wall_time=time.time(),
                step=int(step),
                summary=summary_pb2.Summary(value=values),
            )
        )

    @staticmethod
    def _value(tag: str, array: np.ndarray, summary_metadata):
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.util import tensor_util

        return summary_pb2.Summary.Value(
            tag=tag,
            tensor=tensor_util.make_tensor_proto(array),
            metadata=summary_metadata,
        )

    @staticmethod
    def _scalar_metadata():
        from tensorboard.plugins.scalar import metadata as scalar_metadata

        return scalar_metadata.create_summary_metadata(
            display_name="", description=""
        )

    def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Writes each `tag: value` at `step`; `None` values are skipped."""
        meta = self._scalar_metadata()
        values = [
            self._value(tag, np.array(float(value), np.float32), meta)
            for tag, value in scalars.items()
            if value is not None
        ]
        if values:
            self._write(step, values)

    def write_step_times(self, points: list[tuple[int, float]]) -> None:
        """`STEP_TIME_TAG` at each `(global step, ms)`, in one go."""
        meta = self._scalar_metadata()
        for step, value in points:
            array = np.array(float(value), np.float32)
            self._write(step, [self._value(STEP_TIME_TAG, array, meta)])

    def write_report(
        self, step: int, report_json: str, tag: str = metadata.REPORT_TAG
    ) -> None:
        """The report's JSON at `step` (the epoch), under `tag`, with
        the dashboard plugin's name, so the "XLA" tab reads it."""
        from tensorboard.compat.proto import summary_pb2

        meta = summary_pb2.SummaryMetadata.FromString(
            metadata.summary_metadata()
        )
        array = np.array(report_json.encode("utf-8"), dtype=object)
        self._write(step, [self._value(tag, array, meta)])

    def write_text(self, step: int, tag: str, text: str) -> None:
        from tensorboard.plugins.text import metadata as text_metadata

        meta = text_metadata.create_summary_metadata(
            display_name="", description=""
        )
        array = np.array(text.encode("utf-8"), dtype=object)
        self._write(step, [self._value(tag, array, meta)])

"""TensorBoard writing through `tf.summary`: the TensorFlow backend's
`EventWriter`.

The tags, the per-epoch scalars and what an epoch writes are the same on
every backend (`core.summaries`); this writer puts them in
`<log_dir>/train` with TensorFlow's summary ops.
"""

from __future__ import annotations

from keras_xla.core.summaries import (
    REPORT_TAG,
    STEP_TIME_TAG,
    EventWriter,
)
from keras_xla.dashboard import metadata


class SummaryWriter(EventWriter):
    """Lazily created TensorBoard writer for the tuner's summaries.

    Args:
        log_dir: The TensorBoard log directory (the one passed to
            `keras.callbacks.TensorBoard`).
    """

    def _open(self):
        import tensorflow as tf

        with tf.init_scope():
            return tf.summary.create_file_writer(self.run_dir)

    def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Writes each `tag: value` at `step`; `None` values are skipped."""
        import tensorflow as tf

        with tf.init_scope(), self._get().as_default():
            for tag, value in scalars.items():
                if value is not None:
                    tf.summary.scalar(tag, float(value), step=step)

    def write_step_times(self, points: list[tuple[int, float]]) -> None:
        """`STEP_TIME_TAG` at each `(global step, ms)`, in one go."""
        import tensorflow as tf

        with tf.init_scope(), self._get().as_default():
            for step, value in points:
                tf.summary.scalar(STEP_TIME_TAG, value, step=step)

    def write_report(
        self, step: int, report_json: str, tag: str = REPORT_TAG
    ) -> None:
        """The report's JSON at `step` (the epoch), under `tag`, with
        the dashboard plugin's name, so the "XLA" tab reads it."""
        import tensorflow as tf

        with tf.init_scope(), self._get().as_default():
            tf.summary.write(
                tag,
                tf.constant(report_json),
                step=step,
                metadata=metadata.summary_metadata(),
            )

    def write_text(self, step: int, tag: str, text: str) -> None:
        import tensorflow as tf

        with tf.init_scope(), self._get().as_default():
            tf.summary.text(tag, text, step=step)

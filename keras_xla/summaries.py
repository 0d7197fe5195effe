"""TensorBoard writing: per-epoch `xla/` scalars and text summaries.

Events go to `<log_dir>/train`, the run directory that
`keras.callbacks.TensorBoard` uses for training scalars, with the epoch as
the step, so both callbacks show side by side when given one `log_dir`.
"""

from __future__ import annotations

import os

# Scalar tags, one point per epoch.
SCALAR_TAGS = (
    "xla/compilations",
    "xla/compile_seconds",
    "xla/recompilations",
    "xla/step_time_ms_median",
    "xla/step_time_ms_p90",
    "xla/examples_per_second",
)
FINDINGS_TAG = "xla/findings"
TRAIN_RUN = "train"


class SummaryWriter:
    """Lazily created TensorBoard writer for the tuner's summaries.

    Args:
        log_dir: The TensorBoard log directory (the one passed to
            `keras.callbacks.TensorBoard`).
    """

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self._writer = None

    @property
    def run_dir(self) -> str:
        return os.path.join(self.log_dir, TRAIN_RUN)

    def _get(self):
        if self._writer is None:
            import tensorflow as tf

            with tf.init_scope():
                self._writer = tf.summary.create_file_writer(self.run_dir)
        return self._writer

    def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Writes each `tag: value` at `step`; `None` values are skipped."""
        import tensorflow as tf

        with tf.init_scope(), self._get().as_default():
            for tag, value in scalars.items():
                if value is not None:
                    tf.summary.scalar(tag, float(value), step=step)

    def write_text(self, step: int, tag: str, text: str) -> None:
        import tensorflow as tf

        with tf.init_scope(), self._get().as_default():
            tf.summary.text(tag, text, step=step)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

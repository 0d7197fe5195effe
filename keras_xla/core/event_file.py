"""TensorBoard event files written without TensorFlow.

TensorBoard's own event file writer writes through TensorFlow's file
system wherever TensorFlow is installed, importing it into a process
that trains on JAX. `EventFile` writes the same file with Python's own:
TFRecord framing (length, its masked CRC-32C, the serialized `Event`,
its masked CRC-32C) with TensorBoard's protos and checksum, and the name
TensorBoard's writer gives it.
"""

from __future__ import annotations

import itertools
import os
import socket
import time

from keras_xla.core import files

_FILES = itertools.count()


class EventFile:
    """A new TensorBoard event file of this process's in `run_dir`, a
    run folder keras_xla makes if missing (`files.own_directory`: never
    through a link)."""

    def __init__(self, run_dir: str) -> None:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        files.own_directory(run_dir)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}."
            f"{socket.gethostname()}.{os.getpid()}.{next(_FILES)}"
        )
        flags = (
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        )
        fd = os.open(os.path.join(run_dir, name), flags, 0o644)
        self._records = RecordWriter(open(fd, "wb"))
        self.add_event(
            event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        )

    def add_event(self, event) -> None:
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        self._records.close()

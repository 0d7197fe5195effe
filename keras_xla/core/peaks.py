"""The peak FLOP/s measured on this machine, kept across processes.

A backend measures a device's peak with a short matmul chain under XLA
(`keras-xla doctor`, or `XLATuner(peak_flops="measure")`) and keeps it
here under the key of what it holds for (processor, devices, framework
version, dtype). `XLATuner(peak_flops=None)` uses the peak kept for
its key, on every backend: reading it compiles nothing.

Pure Python: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from keras_xla.core import cache_home, json_files

PEAKS_FILE = "peak_flops.json"


def _path() -> str:
    return os.path.join(cache_home.directory(), PEAKS_FILE)


def known(key: str) -> float | None:
    """The peak kept for `key` (on disk, or in this process where the
    disk could not keep it: `json_files`), or None."""
    peak = json_files.read_object(_path()).get(key)
    return float(peak) if isinstance(peak, (int, float)) else None


def measured(key: str, measure: Callable[[], float]) -> float:
    """The peak kept for `key`, else `measure()`'s, then kept (in memory
    for this process where it cannot be kept on disk)."""
    peak = known(key)
    if peak is None:
        peak = measure()
        try:
            json_files.update(_path(), lambda peaks: peaks.update({key: peak}))
        except OSError as error:
            cache_home.cannot_keep("the measured peak FLOP/s", error)
    return peak

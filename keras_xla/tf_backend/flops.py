"""Achieved FLOP/s and utilization: HLO FLOPs against time and a peak.

`hlo.analyze()` counts a step's FLOPs from its dots and convolutions; with
the step's measured time that gives achieved FLOP/s, and against the
device's peak (given by the user, or measured by a short matmul probe in the
step's dtype) a utilization figure.
"""

from __future__ import annotations

import math
import platform
import time
from typing import Any

from keras_xla.core import hardware, peaks
from keras_xla.tf_backend.hlo import HloStats


def achieved_flops(stats: HloStats, step_seconds: float) -> float:
    """FLOP/s of a step that took `step_seconds` (e.g. a median)."""
    if not step_seconds > 0:
        raise ValueError(f"step_seconds must be > 0, got {step_seconds}.")
    return stats.flops / step_seconds


def utilization(achieved: float, peak: float) -> float:
    """`achieved / peak`, not clipped: above 1.0 means the peak probe
    underestimated the device (or the step was timed too short)."""
    if not peak > 0:
        raise ValueError(f"peak must be > 0 FLOP/s, got {peak}.")
    return achieved / peak


def measure_peak_flops(
    dtype: str = "float32", size: int = 512, matmuls: int = 8, repeats: int = 5
) -> float:
    """Matmul FLOP/s this device reaches in `dtype` under XLA: the FLOPs of
    a jit-compiled chain of `matmuls` `[size, size]` matmuls over its
    fastest of `repeats` runs after a compiling one (~0.2 s on 2 CPU cores).
    `dtype` names a floating dtype."""
    import tensorflow as tf

    tf_dtype = tf.as_dtype(dtype)
    if not tf_dtype.is_floating or min(size, matmuls, repeats) < 1:
        raise ValueError(
            "measure_peak_flops() needs a floating dtype and sizes >= 1, got "
            f"{dtype=}, {size=}, {matmuls=}, {repeats=}."
        )
    # Scaled so that chained products keep their magnitude (no inf/nan).
    scale = 1.0 / math.sqrt(size)
    a = tf.cast(tf.random.normal([size, size], seed=0) * scale, tf_dtype)
    b = tf.cast(tf.random.normal([size, size], seed=1) * scale, tf_dtype)

    @tf.function(jit_compile=True)
    def chain(x: Any, w: Any) -> Any:
        for _ in range(matmuls):
            x = tf.matmul(x, w)
        return x

    chain(a, b).numpy()  # compiles
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        chain(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 * matmuls / best


def machine_key(dtype: str) -> str:
    """What a measured peak is valid for: processor, devices, TensorFlow
    and the dtype."""
    import tensorflow as tf

    devices = ",".join(d.name for d in tf.config.list_logical_devices())
    model = hardware.cpu_model() or platform.machine()
    return f"{model}|{devices}|tf {tf.__version__}|{dtype}"


def known_peak_flops(dtype: str = "float32") -> float | None:
    """The peak measured earlier on this machine for `dtype`, or None.
    Reading it costs no compilation."""
    return peaks.known(machine_key(dtype))


def measured_peak_flops(dtype: str = "float32") -> float:
    """`measure_peak_flops(dtype)` (one small compilation), kept for
    this machine (`core.peaks`), so later runs and processes read it for
    free."""
    return peaks.measured(machine_key(dtype), lambda: measure_peak_flops(dtype))

import math

import pytest

from keras_xla.tf_backend.flops import (
    achieved_flops,
    measure_peak_flops,
    utilization,
)
from keras_xla.tf_backend.hlo import HloStats


def test_achieved_flops_and_utilization():
    stats = HloStats(
        kernels_per_step=3,
        fusions=1,
        single_op_fusions=0,
        compute_ops=4,
        fused_ops=2,
        fusion_ratio=0.5,
        unoptimized_ops=9,
        converts=0,
        unfused_converts=0,
        flops=128,
        largest_unfused=(),
        unknown_trip_counts=0,
    )
    assert achieved_flops(stats, 0.001) == pytest.approx(128 / 0.001)
    assert utilization(50e9, 200e9) == 0.25
    assert utilization(300.0, 200.0) == 1.5  # not clipped
    with pytest.raises(ValueError, match="step_seconds"):
        achieved_flops(stats, 0.0)
    with pytest.raises(ValueError, match="peak"):
        utilization(1.0, 0.0)


# --- real XLA compiles on the CPU -------------------------------------------


def test_measure_peak_flops_is_quick_and_positive():
    for dtype in ("float32", "bfloat16"):
        peak = measure_peak_flops(dtype)  # defaults: 8 x [512,512] matmuls
        assert math.isfinite(peak) and peak > 1e9
    with pytest.raises(ValueError, match="floating"):
        measure_peak_flops("int32")

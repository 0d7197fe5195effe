"""The HLO analysis of a model's train step for one steady signature.

After the first epoch, the optimized HLO of the train step for the epoch's
real batch shapes gives kernels per step, fusion ratio, converts and
FLOPs, and so achieved FLOP/s and utilization (`report.hlo`). The result
is computed once per step function and signature, and kept with the step
function, so a later fit with the same shapes reuses it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from keras_xla.core.report import HloSection
from keras_xla.core.signatures import Signature
from keras_xla.tf_backend import flops as flops_lib
from keras_xla.tf_backend import hlo as hlo_lib

HLO_TEXT = os.path.join("hlo", "train_step.optimized.txt")


def analyze_train_step(
    model: Any,
    signature: Signature,
    cache: dict,
    epoch: int,
    median_ms: float | None,
    peak_flops: float | None = None,
    log_dir: str | None = None,
) -> HloSection:
    """The report's `hlo` section for `model`'s train step on
    `signature`'s shapes.

    Args:
        model: The compiled Keras model.
        signature: The steady signature to analyze.
        cache: Results kept per signature (the step function's own).
        epoch: The epoch the signature comes from.
        median_ms: The epoch's median train step, for achieved FLOP/s.
        peak_flops: The hardware's peak; None measures it (once per
            process and dtype).
        log_dir: Where the HLO text goes (`<log_dir>/hlo/`), if given.
    """
    start = time.perf_counter()
    step = getattr(model.train_step, "__wrapped__", model.train_step)
    batch = None
    if signature.tensors not in cache:
        batch = batch_from_signature(signature)
        cache[signature.tensors] = hlo_lib.analyze_function(step, batch)
    result = cache[signature.tensors]
    seconds = time.perf_counter() - start
    achieved = (
        flops_lib.achieved_flops(result, median_ms / 1000.0)
        if median_ms
        else None
    )
    peak = peak_flops
    if peak is None and achieved is not None:
        dtype = getattr(model.dtype_policy, "compute_dtype", "float32")
        peak = flops_lib.measured_peak_flops(dtype)
    section = HloSection(
        epoch=epoch,
        shapes={t.path: list(t.shape) for t in signature.tensors},
        analysis_seconds=round(seconds, 3),
        kernels_per_step=result.kernels_per_step,
        fusions=result.fusions,
        fusion_ratio=round(result.fusion_ratio, 4),
        converts=result.converts,
        unfused_converts=result.unfused_converts,
        flops_per_step=result.flops,
        largest_unfused=[
            f"{op.opcode} {op.name} {op.shape}" for op in result.largest_unfused
        ],
        achieved_tflops=_tera(achieved),
        peak_tflops=_tera(peak),
        utilization=(
            round(flops_lib.utilization(achieved, peak), 4)
            if achieved and peak
            else None
        ),
    )
    if log_dir and batch is not None:
        text = hlo_lib.compiler_ir(step, batch, stage="optimized_hlo")
        section.text = hlo_lib.write_hlo_text(
            os.path.join(log_dir, HLO_TEXT), text
        )
    return section


def batch_from_signature(signature: Signature) -> tuple:
    """Zero tensors with a signature's shapes, dtypes and structure
    (`x`, `y`, `sample_weight`; `/key` for dicts, `/i` for lists)."""
    import tensorflow as tf

    top: dict[str, Any] = {}
    for t in signature.tensors:
        parts = t.path.split("/")
        value = tf.zeros(t.shape, dtype=t.dtype)
        node = top
        for key, nxt in zip(parts, parts[1:] + [None]):
            if nxt is None:
                node[key] = value
            else:
                node = node.setdefault(key, {})
    return tuple(
        _listify(top[name])
        for name in ("x", "y", "sample_weight")
        if name in top
    )


def _listify(node):
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_listify(node[k]) for k in sorted(node, key=int)]
    return {k: _listify(v) for k, v in node.items()}


def _tera(value: float | None) -> float | None:
    # Six significant digits: tiny test models reach micro-TFLOP/s.
    return None if value is None else float(f"{value / 1e12:.6g}")

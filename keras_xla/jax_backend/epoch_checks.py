"""What the tuner checks at each epoch's end on JAX, on the live model.

As on TensorFlow (`tf_backend.epoch_checks`): `analyze_hlo` analyzes the
jitted train step's HLO once per fit, at the epoch's steady signature,
and returns the report's pieces and `(code, message, fix)` findings for
the owner of the fit to apply (it runs the epoch lints, `core.lints`).
The tensor-core alignment lint is not run: it reads the GPUs through
TensorFlow.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from keras_xla.core import files
from keras_xla.core import findings as codes
from keras_xla.core.figures import rounded
from keras_xla.core.report import EpochStats, HloSection
from keras_xla.core.timing import steady_signature
from keras_xla.jax_backend import environment, hlo

logger = logging.getLogger(__name__)

FIX = "Nothing to do; pass analyze_hlo=False to skip it."


def analyze_hlo(
    model: Any,
    settings: Any,
    stats: EpochStats,
    records: list,
    examples: dict,
    events: Any,
) -> tuple[HloSection | None, list[tuple], dict | None]:
    """The HLO section for the epoch's steady signature.

    Args:
        model: The live Keras model (its jitted train step and state).
        settings: The tuner's settings (`log_dir`, `peak_flops`).
        stats: The epoch's statistics (its median step time).
        records: The epoch's step records.
        examples: A batch of each signature the tap kept
            (`StepTap.examples`).
        events: The fit's `CompileEvents` (an analysis that compiles the
            step again is counted apart from training's).

    Returns:
        The section (None when the analysis did not run), `(code, message,
        fix)` findings for why it did not, and the `outside_compilations`
        entry when analyzing compiled the step again (None when it hit
        JAX's cache).
    """
    sig = steady_signature(records)
    jitted = hlo.jitted_step(model)
    data = examples.get(sig) if sig is not None else None
    if jitted is None or data is None:
        off = (
            codes.HLO_ANALYSIS_OFF,
            "The HLO analysis found no jitted train step (or no batch of "
            "its steady shapes) on the model.",
            FIX,
        )
        return None, [off], None
    before = events.pending("train")
    shapes = sig.shapes()
    try:
        section, text = hlo.analyze(
            jitted,
            hlo.state_specs(model, environment.device_count() > 1),
            data,
            stats.epoch,
            shapes,
        )
        if settings.log_dir:
            # Written with the fit's other outputs (their failures are
            # theirs, reported as `output-failed`).
            path = os.path.join(settings.log_dir, hlo.TEXT_PATH)
            section.text = files.write_later(path, text)
    except Exception as error:  # noqa: BLE001 - a diagnostic
        failed = (
            codes.HLO_ANALYSIS_FAILED,
            f"The HLO analysis failed: {type(error).__name__}: {error}",
            FIX,
        )
        return None, [failed], None
    outside = None
    extra = events.take("train")[before:]
    if extra:
        section.source = "compiled again"
        outside = {
            "function": "train",
            "shapes": shapes,
            "compilations": len(extra),
            "found": "the HLO analysis",
        }
    _add_rates(section, stats, model, settings.peak_flops)
    return section, [], outside


def _add_rates(section, stats, model, peak_flops) -> None:
    """The achieved TFLOP/s at the epoch's median step and, given a
    peak (`peak_flops`), the utilization."""
    median = stats.step_time_ms["median"]
    if not (median and section.flops_per_step):
        return
    achieved = section.flops_per_step / (median / 1000.0)
    section.achieved_tflops = rounded(achieved / 1e12)
    dtype = model.dtype_policy.compute_dtype
    try:
        peak = hlo.peak_flops(peak_flops, dtype)
    except Exception as error:  # noqa: BLE001 - a diagnostic
        peak = None
        logger.info("No peak FLOP/s on JAX: %s", error)
    if peak:
        section.peak_tflops = rounded(peak / 1e12)
        section.utilization = rounded(achieved / peak)

"""What the tuner checks at each epoch's end, on the live model.

`analyze_hlo` analyzes the train step's HLO once per fit (the epoch's
steady signature); `lint` runs the epoch lints (`core.lints`, and the
tensor-core alignment of the model's layers). Both take values and
return the report section and `(code, message, fix)` findings for the
owner of the fit to apply.
"""

from __future__ import annotations

from typing import Any

from keras_xla.core import lints
from keras_xla.core.report import EpochStats, HloSection
from keras_xla.core.timing import steady_signature
from keras_xla.tf_backend.alignment import tensor_core_misalignment
from keras_xla.tf_backend.hlo_analysis import analyze_or_explain


def analyze_hlo(
    model: Any,
    settings: Any,
    stats: EpochStats,
    records: list,
    cache: dict,
    compile_log: list,
) -> tuple[HloSection | None, list[tuple]]:
    """The HLO section for the epoch's steady signature (None when there
    is no signature to analyze) and the finding that says why not."""
    signature = steady_signature(records)
    if signature is None:
        return None, []
    section, finding = analyze_or_explain(
        model,
        signature,
        cache,
        stats.epoch,
        stats.step_time_ms["median"],
        compile_log,
        settings.analyze_hlo,
        settings.peak_flops,
        settings.log_dir,
    )
    return section, [finding] if finding else []


def lint(
    model: Any,
    stats: EpochStats,
    records: list,
    compile_seconds: float,
    params: dict,
) -> list[tuple[str, str, str]]:
    """The epoch's lint findings."""
    misaligned = []
    if stats.epoch == 0:
        signature = steady_signature(records)
        batch = signature.batch_size() if signature else None
        misaligned = tensor_core_misalignment(model, batch)
    return lints.epoch_lints(
        stats.epoch,
        stats.step_time_ms["median"],
        int(getattr(model, "steps_per_execution", 1) or 1),
        compile_seconds,
        params,
        misaligned,
        stats.steps,
        dispatch_ms=stats.step_time_ms.get("dispatch_median"),
        tuner_ms=stats.step_time_ms.get("tuner_median"),
    )


def probe_findings(functions) -> list[tuple[str, str, str]]:
    """`folded-dimensions` for a step with more dynamic dimensions than
    the probe records one by one (`StepFunctions` or None)."""
    from keras_xla.core import findings
    from keras_xla.tf_backend.probe import FOLDED, KEPT_DIMS

    out = []
    for function in ("train", "test"):
        variant = functions.active(function) if functions else None
        folded = variant.probe.folded if variant is not None else []
        if folded:
            names = ", ".join(f"`{path}` dim {d}" for path, d in folded)
            out.append(
                (
                    findings.FOLDED_DIMENSIONS,
                    f"{function}: the step has more than {KEPT_DIMS + 1} "
                    f"dynamic dimensions; the probe records the first "
                    f"{KEPT_DIMS} and folds the other {len(folded)} "
                    f"({names}) into one hash. Compilations are still "
                    "counted, but one caused by a folded dimension names "
                    f"the input `{FOLDED}`, not its own.",
                    "Give the inputs static shapes (padding, bucketing) or "
                    "fewer dynamic dimensions.",
                )
            )
    return out

"""What the tuner checks at each epoch's end, on the live model.

`analyze_hlo` analyzes the train step's HLO once per fit (the epoch's
steady signature); `misaligned` finds the layers the tensor-core lint
names (the owner runs the epoch lints, `core.lints`, with them). Both
take values and return the report section, names and `(code, message,
fix)` findings for the owner of the fit to apply.
"""

from __future__ import annotations

from typing import Any

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


def misaligned(model: Any, stats: EpochStats, records: list) -> list[str]:
    """The first epoch's layers whose sizes miss the tensor cores'
    multiples at its steady batch (`alignment`); none after it."""
    if stats.epoch != 0:
        return []
    signature = steady_signature(records)
    batch = signature.batch_size() if signature else None
    return tensor_core_misalignment(model, batch)


def probe_findings(functions) -> list[tuple[str, str, str]]:
    """`folded-dimensions` for a step with more dynamic dimensions than
    the probe records one by one (`StepFunctions` or None)."""
    from keras_xla.core import findings
    from keras_xla.tf_backend.probe import FOLDED, KEPT_DIMS

    fix = (
        "Give the inputs static shapes (padding, bucketing) or fewer "
        "dynamic dimensions."
    )
    out = []
    for function in ("train", "test"):
        variant = functions.active(function) if functions else None
        folded = variant.probe.folded if variant is not None else []
        if folded:
            names = ", ".join(f"`{path}` dim {d}" for path, d in folded)
            message = (
                f"{function}: the step has more than {KEPT_DIMS + 1} "
                f"dynamic dimensions; the probe records the first "
                f"{KEPT_DIMS} and folds the other {len(folded)} "
                f"({names}) into one hash. Compilations are still "
                "counted, but one caused by a folded dimension names "
                f"the input `{FOLDED}`, not its own."
            )
            out.append((findings.FOLDED_DIMENSIONS, message, fix))
    return out

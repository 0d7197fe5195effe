"""Lints on an epoch's measured figures: is the step worth compiling?

Each lint takes numbers and returns `(message, fix)` or None; the owner
of the fit records what `epoch_lints` finds.

Pure logic: nothing here imports TensorFlow or Keras.
"""

from __future__ import annotations

from typing import Any

from keras_xla.core import figures
from keras_xla.core import findings as codes

DISPATCH_MS = 1.0  # median steps shorter than this are launch-dominated
# Where the host's time in the call was measured apart from the step's
# (an asynchronous backend): the share of the step it takes to call it.
DISPATCH_SHARE = 0.5


def no_steps(epoch: int, steps: int) -> tuple[str, str] | None:
    if steps != 0:
        return None
    return (
        f"Epoch {epoch} trained no step: the dataset gave no batch.",
        "Check the dataset (filters, take/skip, a generator that ends at "
        "once) and steps_per_epoch.",
    )


def dispatch_bound(
    median_ms: float | None,
    steps_per_execution: int,
    dispatch_ms: float | None = None,
) -> tuple[str, str] | None:
    """Steps so short that launching one costs about as much as running
    it, with one step per call: measured where the host's time in the
    call (`dispatch_ms`, the median) is known, else inferred from a
    median step under `DISPATCH_MS`."""
    if median_ms is None or steps_per_execution != 1:
        return None
    fix = (
        "Compile with `steps_per_execution=N` (e.g. 16) so one call runs "
        "N steps."
    )
    if dispatch_ms is not None:
        if median_ms <= 0 or dispatch_ms < DISPATCH_SHARE * median_ms:
            return None
        share = min(dispatch_ms / median_ms, 1.0)
        return (
            f"Calling the train step takes the host {dispatch_ms:.2f} ms "
            f"of each {median_ms:.2f} ms step ({share:.0%}): the device "
            "waits for the host to launch the next step.",
            fix,
        )
    if median_ms >= DISPATCH_MS:
        return None
    return (
        f"The median train step takes {median_ms:.2f} ms: launching the "
        "step costs about as much as running it.",
        fix,
    )


# A step that waits this share of its time for its batch is input-bound:
# XLA speeds up the rest only.
INPUT_SHARE = 0.3
# ... and waits at least this long (ms): a shorter wait is the data
# loop's own cost on a step too short to feed (`dispatch-bound-steps`).
INPUT_MIN_MS = 1.0


def input_bound(
    median_ms: float | None, input_ms: float | None
) -> tuple[str, str] | None:
    """A step that waits `INPUT_SHARE` or more of its median time
    (`median_ms`), and `INPUT_MIN_MS` or more, for its batch (`input_ms`,
    the median wait, where it is measured apart)."""
    share = figures.share(input_ms, median_ms)
    if share is None or share < INPUT_SHARE or input_ms < INPUT_MIN_MS:
        return None
    return (
        f"Each train step waits {input_ms:.2f} ms of its {median_ms:.2f} ms "
        f"({share:.0%}) for its batch: the input pipeline, not the "
        "compiled step, sets the pace, and XLA can speed up only the rest.",
        "Feed the step faster. tf.data: end the pipeline with "
        "`.prefetch(tf.data.AUTOTUNE)`, map with "
        "`num_parallel_calls=tf.data.AUTOTUNE`, `.cache()` what does not "
        "change between epochs, and move work out of `py_function`. A "
        "Python generator or `keras.utils.PyDataset`: `PyDataset(workers=N, "
        "use_multiprocessing=True)`, or precompute the batches.",
    )


OVERHEAD_SHARE = 0.01  # the tuner's goal: under 1% of a step


def tuner_overhead(
    median_ms: float | None, tuner_ms: float | None, steps_per_execution: int
) -> tuple[str, str] | None:
    """The tuner's own work per step (`tuner_ms`, measured in its hooks)
    over `OVERHEAD_SHARE` of the median step: a step too short to time
    without cost."""
    if not median_ms or tuner_ms is None:
        return None
    if tuner_ms <= OVERHEAD_SHARE * median_ms:
        return None
    return (
        f"The tuner's own work takes {tuner_ms * 1000:.1f} us of each "
        f"{median_ms:.3f} ms step ({tuner_ms / median_ms:.1%}; its goal "
        "is under 1%): a step this short cannot be timed for free, and "
        "its figures include that cost.",
        f"Run more steps per call (steps_per_execution="
        f"{max(2 * steps_per_execution, 16)}): the tuner works once per "
        "call. Or keep the tuner for a diagnostic run and train without it.",
    )


def tensor_core_alignment(misaligned: list[str]) -> tuple[str, str] | None:
    """Sizes (`alignment.tensor_core_misalignment`) that keep
    low-precision math off a GPU's tensor cores."""
    if not misaligned:
        return None
    return (
        "Under float16/bfloat16 on a GPU, tensor cores need sizes that are "
        "multiples of 8; not so here: " + ", ".join(misaligned) + ".",
        "Round these sizes up to a multiple of 8.",
    )


def epoch_lints(
    stats: Any, steps_per_execution: int
) -> list[tuple[str, str, str]]:
    """Every lint of one epoch's figures (`stats`, its `EpochStats`), as
    `(code, message, fix)`. Whether compiling pays back is the verdict's
    to say (`verdict.compile_dominates`); tensor-core alignment reads the
    model (`tensor_core_alignment`, TensorFlow's first epoch)."""
    median_ms = figures.MEDIAN_STEP.value(stats)
    found = {
        codes.NO_STEPS: no_steps(stats.epoch, stats.steps),
        codes.DISPATCH_BOUND_STEPS: dispatch_bound(
            median_ms, steps_per_execution, figures.DISPATCH.value(stats)
        ),
        codes.INPUT_BOUND: input_bound(
            median_ms, figures.INPUT_WAIT.value(stats)
        ),
        codes.TUNER_OVERHEAD: tuner_overhead(
            median_ms, figures.TUNER.value(stats), steps_per_execution
        ),
    }
    return [(code, *lint) for code, lint in found.items() if lint is not None]

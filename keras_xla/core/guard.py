"""The recompilation guard: a step function that keeps compiling for new
shapes, and what to do before it costs the run more than XLA saves.

`RecompileGuard.observe` takes the train function's step records as they
are collected (`StepRecord.new` and `.previous` mark its compilations)
and returns the storm (the report's `GuardSection`) once all three
hold:

- the function recompiled more than `budget` times in the fit;
- shapes do not repeat: at least half of its last `2 * budget` calls
  compiled a new one (a bucketed pipeline's few shapes stop compiling
  once each bucket was seen, so its recent calls do not);
- its recompilations cost more seconds than XLA has saved so far (the
  owner's estimate from the no-XLA baseline; none before it measured).

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Callable
from typing import Any

from keras_xla.core.sections import GuardSection
from keras_xla.core.signatures import explain
from keras_xla.core.timing import StepRecord

# PyTorch's compiler gives up on a function after 8 recompilations
# (`torch._dynamo.config.recompile_limit`); the same budget here, with the
# window rule above, leaves a pipeline of up to 9 buckets (and a partial
# last batch) untouched: its 9th recompilation would need a 10th shape.
DEFAULT_BUDGET = 8
ACTIONS = ("fallback", "per_shape", "bucket", "raise", "warn")
# The actions after which the rest of the fit runs (some) shapes without
# XLA, from `off_from` on; and those that change how the fit runs.
OFF_ACTIONS = ("fallback", "per_shape")
ACTING = (*OFF_ACTIONS, "bucket")
# A call is looked at (its records collected: 0.6 ms on TensorFlow) only
# where it may have compiled: it took this long, and twice the typical
# call that compiled nothing. An XLA compilation takes longer than both.
CHECK_SECONDS = 0.02
# The drifting dimension's last values a storm names.
SHOWN_VALUES = 5


class XLARecompileStormError(RuntimeError):
    """A step function kept compiling for new shapes
    (`XLATuner(on_recompile_storm="raise")`)."""


def rate(storm: GuardSection) -> float:
    """New shapes per call, in the storm's last calls."""
    return storm.compiled / storm.window if storm.window else 0.0


def projected(
    storm: GuardSection, remaining_calls: int | None
) -> tuple[float, float]:
    """`(compilations, seconds)` the rest of the fit would compile at the
    storm's recent rate (0 where unknown): what the finding guesses when
    the guard acts; after a fallback `count_avoided` measures it."""
    if not remaining_calls or remaining_calls < 0:
        return 0.0, 0.0
    each = storm.compile_seconds / max(storm.recompilations, 1)
    count = rate(storm) * remaining_calls
    return count, count * each


def shapes_key(shapes: dict) -> tuple:
    """A compiled program's inputs (`{path: shape}`) as a set's key."""
    return tuple(sorted((path, tuple(shape)) for path, shape in shapes.items()))


def signature_key(signature: Any) -> tuple:
    """A `Signature`'s shapes as `shapes_key` writes them."""
    return shapes_key(signature.shapes())


def count_avoided(
    storm: GuardSection,
    records: list,
    knows: Callable[[Any], bool],
    epoch: int,
    avoided: set[tuple],
) -> None:
    """After the guard acted, what it did, measured on the train `records`
    of `epoch` from `off_from` on. `knows(signature)`: whether XLA's step
    ran that step (it had compiled the shapes before the storm, or the
    bucket switch padded them to an edge). A fallback's (whole or per
    shape) shapes XLA did not know join `avoided`, each a compilation
    the fit would have made with XLA on, at the storm's mean compile
    time: the storm's `projected_*` then say that, no longer the rate's
    guess. Per shape and bucketed, the steps each side ran and their
    seconds are added up too."""
    if storm.action not in ACTING or not storm.off_from:
        return
    off_epoch, off_step = storm.off_from
    if epoch < off_epoch:
        return
    for record in records:
        if epoch == off_epoch and record.first_step < off_step:
            continue
        known = [knows(step[0]) for step in record.signatures]
        if storm.action in OFF_ACTIONS:
            avoided.update(
                signature_key(step[0])
                for step, xla in zip(record.signatures, known)
                if not xla
            )
        if storm.action == "fallback" or not known:
            continue
        if known[0]:  # one batch per call: one side
            storm.xla_steps += record.steps
            storm.xla_seconds = round(storm.xla_seconds + record.seconds, 4)
        else:
            storm.plain_steps += record.steps
            storm.plain_seconds = round(storm.plain_seconds + record.seconds, 4)
    if storm.action in OFF_ACTIONS:
        each = storm.compile_seconds / max(storm.recompilations, 1)
        storm.projected_compilations = float(len(avoided))
        storm.projected_seconds = round(len(avoided) * each, 2)


def dimensions(storm: GuardSection) -> str:
    """The input's dimensions that kept changing, in words ("" if none
    is known): `dimension 1`, `dimensions 1, 2`."""
    dims = storm.dims or ([] if storm.dim is None else [storm.dim])
    if not dims:
        return ""
    word = "dimension" if len(dims) == 1 else "dimensions"
    return f"{word} {', '.join(map(str, dims))}"


def where(storm: GuardSection) -> str:
    """The input and its dimensions that kept changing, in words."""
    if storm.input is None:
        return "its inputs"
    dims = dimensions(storm)
    return f"input `{storm.input}`" + (f", {dims}" if dims else "")


def message(storm: GuardSection) -> str:
    shown = ", ".join(str(v) for v in storm.values)
    values = f" (last sizes: {shown})" if shown else ""
    return (
        f"train recompiled {storm.recompilations} times for new shapes of "
        f"{where(storm)}{values}, {storm.compiled} of its last "
        f"{storm.window} calls: {storm.compile_seconds:.2f} s compiling, "
        f"more than XLA had saved ({storm.saved_seconds:.2f} s)."
    )


def act(
    storm: GuardSection,
    action: str,
    epoch: int,
    step: int,
    remaining_calls: int | None,
    workers: int = 1,
    kept: int = 0,
) -> tuple[str, str, str]:
    """Fills the storm's `action`, what a fallback avoids at its rate
    over the fit's `remaining_calls`, and where XLA goes off (train step
    `step` of `epoch`, next; per shape: for new shapes, XLA's step
    running the `kept` shapes it compiled); returns the finding's
    message and fix and, for a fallback, the reason for XLA's state (""
    otherwise). One of a job's `workers` warns instead of falling back:
    alone without XLA, it would make the others wait for it at every
    collective."""
    count, seconds = projected(storm, remaining_calls)
    storm.projected_compilations = round(count, 1)
    storm.projected_seconds = round(seconds, 2)
    if action in ACTING and workers > 1:
        storm.action = "warn"
        said = message(storm) + (
            f" Training goes on with XLA: this is one of a job's {workers} "
            "workers, and one that left XLA alone would make the others "
            "wait for it at every collective."
        )
        return said, fix(storm), ""
    storm.action = action
    storm.off_from = [epoch, step] if action in ACTING else []
    said = message(storm)
    if action == "raise":
        return said, fix(storm), ""
    if action == "warn":
        said += " Training goes on with XLA (on_recompile_storm='warn')."
        return said, fix(storm), ""
    if action == "bucket":
        said += (
            f" From epoch {epoch}, step {step} on, {where(storm)} is padded "
            f"up to the sizes {storm.edges}: {len(storm.edges)} "
            f"program{'s' if len(storm.edges) != 1 else ''}, "
            f"{storm.padding_share:.0%} of the padded work padding, about "
            f"{storm.bucket_saved_seconds:.1f} s saved against compiling "
            "every size (on_recompile_storm='bucket')."
        )
        reason = (
            f"XLA on; the recompilation guard pads {where(storm)} up to "
            f"{storm.edges} from epoch {epoch}, step {step}"
        )
        return said, fix(storm), reason
    if action == "per_shape":
        storm.kept_shapes = kept
        said += (
            f" XLA's step keeps running the {kept} shapes it compiled; "
            f"from epoch {epoch}, step {step} on, a new shape runs "
            "without XLA instead of compiling "
            "(on_recompile_storm='per_shape')."
        )
        reason = (
            f"XLA runs the {kept} shapes it compiled; the recompilation "
            f"guard runs new shapes of {where(storm)} without XLA from "
            f"epoch {epoch}, step {step}"
        )
    else:
        said += (
            f" XLA is off from epoch {epoch}, step {step} on "
            "(on_recompile_storm='fallback')."
        )
        reason = (
            f"the recompilation guard turned XLA off at epoch {epoch}, "
            f"step {step}: train kept compiling for new shapes of "
            f"{where(storm)}"
        )
    if count:
        said += (
            f" At that rate the rest of the fit would have compiled about "
            f"{count:.0f} more times ({seconds:.1f} s)."
        )
    return said, fix(storm), reason


def fix(storm: GuardSection) -> str:
    return (
        f"Give {where(storm)} a few fixed sizes: crop or slice to one "
        "size, or pad to a few lengths (`keras_xla.data`'s helpers, "
        "`padded_batch` with `padded_shapes`, bucketing), so XLA "
        "compiles each once. If the sizes are bounded and few, raise "
        f"`XLATuner(max_recompilations=...)` above {storm.budget}."
    )


class RecompileGuard:
    """Watches one fit's train calls for a recompilation storm.

    Args:
        budget: Recompilations allowed before the other two rules are
            asked (`XLATuner(max_recompilations=...)`).
    """

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = budget
        self.recompilations = 0
        self.compile_seconds = 0.0
        self._recent: collections.deque = collections.deque(maxlen=2 * budget)
        self._steady: collections.deque = collections.deque(maxlen=64)
        self._values: collections.deque = collections.deque(maxlen=SHOWN_VALUES)
        self._last = None  # the last recompilation's primary change
        self._dims: list = []  # and every dimension of its input changed
        # The median call that compiled nothing (None: none seen yet).
        self.typical_seconds: float | None = None
        # Once found, the guard is spent.
        self.storm: GuardSection | None = None

    def observe(
        self, records: list[StepRecord], saved_seconds: float, epoch: int
    ) -> GuardSection | None:
        """Takes the train calls collected since the last call; returns
        the storm the first time the rules hold (the report's section,
        its `action` and what follows from it for the owner to fill),
        else None."""
        if self.storm is not None:
            return None
        if any(not r.new for r in records):
            steady = [r.seconds for r in records if not r.new]
            self._steady.extend(steady)
            self.typical_seconds = statistics.median(self._steady)
        for record in records:
            self._take(record)
            if self._holds(saved_seconds):
                last = self._last
                self.storm = GuardSection(
                    action="",
                    budget=self.budget,
                    epoch=epoch,
                    step=record.first_step,
                    recompilations=self.recompilations,
                    compile_seconds=round(self.compile_seconds, 4),
                    saved_seconds=round(max(saved_seconds, 0.0), 4),
                    window=len(self._recent),
                    compiled=sum(self._recent),
                    input=last.input if last else None,
                    dim=last.dim if last else None,
                    dims=list(self._dims),
                    cause=last.cause if last else "",
                    values=list(self._values),
                )
                return self.storm
        return None

    def _take(self, record: StepRecord) -> None:
        again = [key for key in record.new if record.previous.get(key)]
        self._recent.append(bool(again))
        if not again:
            return
        measured = record.measured_compile_seconds
        if len(measured) == len(record.new):
            seconds = sum(
                s for key, s in zip(record.new, measured) if key in again
            )
        else:  # estimated: the call beyond a steady one, shared
            typical = self.typical_seconds or 0.0
            share = len(again) / len(record.new)
            seconds = max(record.seconds - typical, 0.0) * share
        self.recompilations += len(again)
        self.compile_seconds += seconds
        index, replica = again[-1]
        sig = record.signatures[index][replica]
        change, changes = explain(record.previous[index, replica], sig, False)
        self._last = change
        self._dims = sorted(
            {
                c.dim
                for c in changes
                if c.input == change.input and c.dim is not None
            }
        )
        if change.after is not None and change.dim is not None:
            after = change.after
            self._values.append(
                after[change.dim] if change.dim < len(after) else after
            )

    def _holds(self, saved_seconds: float) -> bool:
        return (
            self.recompilations > self.budget
            and 2 * sum(self._recent) >= len(self._recent)
            and self.compile_seconds > max(saved_seconds, 0.0)
        )

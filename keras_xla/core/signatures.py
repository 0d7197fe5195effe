"""Shape signatures: record them, detect new ones, explain the drift.

XLA compiles a jit-compiled step once per concrete input signature: the
concrete shape and dtype of every input tensor, per traced function. A
`Signature` is exactly that key. `SignatureTracker` remembers the signatures
each function has compiled; a signature it has not seen is one XLA
compilation. `explain()` diffs a new signature against the closest one
compiled before (as JAX's cache-miss explanation does) and names the input,
the dimension, the shapes, the cause and the fix.

Pure logic: nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from keras_xla.core import findings

# Causes of a recompilation, as recorded in the report.
PARTIAL_BATCH = "partial_batch"
BATCH_SIZE = "batch_size"
DYNAMIC_DIM = "dynamic_dim"
DTYPE = "dtype"
RANK = "rank"
NEW_INPUT = "new_input"
REMOVED_INPUT = "removed_input"
RETRACE = "retrace"


@dataclasses.dataclass(frozen=True)
class TensorSignature:
    """Concrete shape and dtype of one input tensor at a readable path."""

    path: str
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class Signature:
    """The key XLA compiles on: the traced function and its input shapes.

    Attributes:
        trace: Index of the step function's trace that ran the step (on
            TensorFlow a `tf.function` concrete function; on JAX a rebuilt
            jitted step). A new trace compiles again even for old shapes.
        tensors: Every input tensor, in flattening order.
    """

    trace: int
    tensors: tuple[TensorSignature, ...]

    def batch_size(self) -> int | None:
        """Dim 0 of the first non-scalar input under `x` (else any input)."""
        ranked = [t for t in self.tensors if t.shape]
        for t in ranked:
            if t.path == "x" or t.path.startswith("x/"):
                return t.shape[0]
        return ranked[0].shape[0] if ranked else None

    def by_path(self) -> dict[str, TensorSignature]:
        return {t.path: t for t in self.tensors}

    def shapes(self) -> dict[str, list]:
        """Each input's shape by path, as reports write it."""
        return {t.path: list(t.shape) for t in self.tensors}


@dataclasses.dataclass(frozen=True)
class ShapeChange:
    """One difference between two signatures."""

    input: str | None
    dim: int | None
    before: list | None
    after: list | None
    cause: str


def diff_signatures(old: Signature, new: Signature) -> list[ShapeChange]:
    """Lists every difference from `old` to `new`, with a provisional cause.

    Batch-dimension changes get `BATCH_SIZE`; `classify()` decides whether
    they are a partial last batch, which needs to know the step.
    """
    changes = []
    old_map, new_map = old.by_path(), new.by_path()
    for path, t in new_map.items():
        prev = old_map.get(path)
        if prev is None:
            changes.append(
                ShapeChange(path, None, None, list(t.shape), NEW_INPUT)
            )
            continue
        before, after = list(prev.shape), list(t.shape)
        if prev.dtype != t.dtype or len(before) != len(after):
            cause = DTYPE if prev.dtype != t.dtype else RANK
            changes.append(ShapeChange(path, None, before, after, cause))
            continue
        for dim, (a, b) in enumerate(zip(before, after)):
            if a != b:
                cause = BATCH_SIZE if dim == 0 else DYNAMIC_DIM
                changes.append(ShapeChange(path, dim, before, after, cause))
    for path, t in old_map.items():
        if path not in new_map:
            changes.append(
                ShapeChange(path, None, list(t.shape), None, REMOVED_INPUT)
            )
    return changes


def closest_previous(
    previous: list[Signature], new: Signature
) -> Signature | None:
    """The previously compiled signature with the fewest differences.

    Ties go to the most recent one, so the explanation reads as "what changed
    since last time".
    """
    best, best_key = None, None
    for age, sig in enumerate(reversed(previous)):
        key = (len(diff_signatures(sig, new)), sig.trace != new.trace, age)
        if best_key is None or key < best_key:
            best, best_key = sig, key
    return best


def classify(changes: list[ShapeChange], last_step: bool) -> list[ShapeChange]:
    """Turns batch-size changes into `PARTIAL_BATCH` where that is what
    they are: the step was the last of its epoch (or of its validation
    run) and every batch dimension that changed shrank. Other changes of
    the same step (a padded length that changed with it) keep their own
    cause: a short last batch is a partial batch whatever else changed."""
    batch = [c for c in changes if c.cause == BATCH_SIZE]
    if not (batch and last_step):
        return changes
    if not all(c.after[0] < c.before[0] for c in batch):
        return changes
    return [
        dataclasses.replace(c, cause=PARTIAL_BATCH)
        if c.cause == BATCH_SIZE
        else c
        for c in changes
    ]


def primary_changes(changes: list[ShapeChange]) -> list[ShapeChange]:
    """One change per distinct cause and input, the batch first: what the
    findings name (the full list stays in the recompilation)."""
    order = [PARTIAL_BATCH, BATCH_SIZE]
    ranked = sorted(
        changes, key=lambda c: order.index(c.cause) if c.cause in order else 2
    )
    seen, out = set(), []
    for c in ranked:
        # Every input's batch dimension shrinks with a short batch: one
        # cause. Other causes count once per input.
        key = (c.cause,) if c.cause in order else (c.cause, c.input)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def explain(
    previous: list[Signature], new: Signature, last_step: bool
) -> tuple[ShapeChange, list[ShapeChange]]:
    """Explains why `new` compiled: the primary change and all changes.

    Args:
        previous: Signatures the same function compiled before, oldest
            first. Must not be empty (a first compilation needs no
            explanation).
        new: The signature that compiled now.
        last_step: Whether the step was the last of its epoch or run.

    Returns:
        The change to report (a batch change first, else the first input
        that changed) and the full list of changes.
    """
    if not previous:
        raise ValueError("explain() needs at least one previous signature.")
    old = closest_previous(previous, new)
    changes = classify(diff_signatures(old, new), last_step)
    if not changes:
        # Same shapes, a new trace of the step: it was traced again.
        change = ShapeChange(None, None, None, None, RETRACE)
        return change, [change]
    return primary_changes(changes)[0], changes


def _where(change: ShapeChange) -> str:
    return f"`{change.input}`" if change.input else "the inputs"


def _fix_dynamic(change: ShapeChange) -> str:
    if len(change.after) == 4:
        return (
            f"Give {_where(change)} a fixed height and width: crop a "
            "constant-size window (`keras_xla.data.fixed_slice(image, "
            "size)`) or resize to one size, instead of crops whose size "
            "varies."
        )
    return (
        f"Pad {_where(change)} dim {change.dim} to a fixed length "
        "(`padded_batch(..., padded_shapes=...)` with constant sizes) or "
        "bucket lengths into a few sizes "
        "(`keras_xla.data.bucket_by_length`), so XLA compiles once per "
        "bucket, not once per length."
    )


_same_structure = (
    "Feed the same structure on every step (for example always pass "
    "sample weights, or never)."
)


@dataclasses.dataclass(frozen=True)
class Cause:
    """What one cause is called in a finding, in a sentence, and its fix.

    Attributes:
        code: The stable finding code (`keras_xla.core.findings`).
        what: The phrase `describe()` puts in parentheses.
        fix: The fix in words, for one change of this cause.
    """

    code: str
    what: str
    fix: Callable[[ShapeChange], str]


CAUSES: dict[str, Cause] = {
    PARTIAL_BATCH: Cause(
        findings.PARTIAL_LAST_BATCH,
        "a partial last batch",
        lambda c: (
            "Batch with `drop_remainder=True` (tf.data "
            "`dataset.batch(n, drop_remainder=True)`), or pad the last "
            "batch to the full size with zero sample weights "
            "(`keras_xla.data.pad_batches(dataset, batch_size)`)."
        ),
    ),
    BATCH_SIZE: Cause(
        findings.BATCH_SIZE_CHANGE,
        "the batch size changed",
        lambda c: (
            "Keep the batch size constant for the whole run; pad short "
            "batches (`keras_xla.data.pad_batches`) instead of feeding them."
        ),
    ),
    DYNAMIC_DIM: Cause(
        findings.DYNAMIC_DIMENSION,
        "a non-batch dimension changed",
        _fix_dynamic,
    ),
    DTYPE: Cause(
        findings.DTYPE_CHANGE,
        "the dtype changed",
        lambda c: f"Cast {_where(c)} to one dtype in the input pipeline.",
    ),
    RANK: Cause(
        findings.RANK_CHANGE,
        "the rank changed",
        lambda c: f"Give {_where(c)} the same rank on every step.",
    ),
    NEW_INPUT: Cause(
        findings.NEW_INPUT, "new input", lambda c: _same_structure
    ),
    REMOVED_INPUT: Cause(
        findings.REMOVED_INPUT, "input removed", lambda c: _same_structure
    ),
    RETRACE: Cause(
        findings.RETRACE,
        "traced again",
        lambda c: (
            "Avoid retracing the step: keep Python arguments and the input "
            "structure constant, and do not rebuild the train function."
        ),
    ),
}
# Stable finding code for each cause.
FINDING_CODES = {name: cause.code for name, cause in CAUSES.items()}


def fix_for(change: ShapeChange) -> str:
    """The fix, in words, for one cause."""
    return CAUSES[change.cause].fix(change)


def describe(
    change: ShapeChange, function: str, changes: list[ShapeChange] | None = None
) -> str:
    """One sentence naming the function, input, dimension(s) and shapes.

    `changes` (all changes of the signature) lets the sentence name every
    dimension of the same input that changed with the same cause.
    """
    if change.cause == RETRACE:
        return (
            f"{function}: the step was traced again (a new trace of the "
            "same step function, or a rebuilt one), so XLA compiled it "
            "again for known shapes."
        )
    if change.cause == NEW_INPUT:
        return f"{function}: new input `{change.input}` {change.after}."
    if change.cause == REMOVED_INPUT:
        return f"{function}: input `{change.input}` disappeared."
    dims = [
        c.dim
        for c in (changes or [change])
        if c.input == change.input
        and c.cause == change.cause
        and c.dim is not None
    ]
    if len(dims) > 1:
        dim = " dims " + ", ".join(str(d) for d in dims)
    else:
        dim = f" dim {change.dim}" if change.dim is not None else ""
    return (
        f"{function}: input `{change.input}`{dim} changed "
        f"{change.before} -> {change.after} ({CAUSES[change.cause].what})."
    )


class SignatureTracker:
    """Remembers which signatures each function has compiled.

    Example:

    >>> tracker = SignatureTracker()
    >>> sig = Signature(0, (TensorSignature("x", (8, 4), "float32"),))
    >>> tracker.observe("train", sig)
    True
    >>> tracker.observe("train", sig)
    False
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], list[Signature]] = {}
        self._known: dict[tuple[str, int], set[Signature]] = {}

    def observe(
        self, function: str, signature: Signature, replica: int = 0
    ) -> bool:
        """Records `signature`; returns True if it is new (a compilation).

        Each replica of a distributed step compiles on its own device, so
        signatures are kept per `(function, replica)`.
        """
        key = (function, replica)
        known = self._known.setdefault(key, set())
        if signature in known:
            return False
        known.add(signature)
        self._seen.setdefault(key, []).append(signature)
        return True

    def compiled(self, function: str, replica: int = 0) -> list[Signature]:
        """The function's compiled signatures, oldest first."""
        return list(self._seen.get((function, replica), []))

    def reset(self, function: str) -> None:
        """Forgets a function (it was rebuilt, so XLA starts afresh)."""
        for key in [k for k in self._seen if k[0] == function]:
            del self._seen[key]
            del self._known[key]

"""Bucket edges for a drifting dimension, chosen from measured costs.

XLA has no symbolic shapes: a dimension that drifts (a padded length, a
crop's side) compiles once per size. Padding sizes up to a few edges
trades compilations for wasted work on the padding. `choose_edges`
finds the edges that cost the fewest seconds over the steps to come:
each edge compiles once (`compile_seconds`, measured), and each step
padded from size `n` to edge `e` does `e - n` units of work it did not
need, at the step's measured time per unit of the dimension
(`step_ms / size`: a step's time grows with its length). The sizes'
counts say how often each comes (the run's histogram so far, scaled to
the steps left). An edge whose program would not fit the device's memory
(`largest`) is not chosen: `largest_fitting` projects a program's bytes
at a size from the programs measured (`memory_line`: fixed weights plus
activations that grow with the size).

The best edges are a partition of the sorted sizes into runs, each
padded to its largest: an exact dynamic program over the distinct sizes.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping

# The share of a device's memory one program may plan to use: the rest
# is the allocator's, the data's and the other programs' live buffers.
MEMORY_SHARE = 0.9


@dataclasses.dataclass(frozen=True)
class BucketChoice:
    """Edges for one dimension, and what they cost and save.

    Attributes:
        edges: The sizes to pad to, increasing (the largest holds every
            size seen).
        compilations: How many programs the edges compile (one each).
        padding_share: The share of the padded work that is padding,
            over the counted steps.
        seconds: The edges' cost: compiling plus the padding's work.
        unbucketed_seconds: One compilation per distinct size, no
            padding: what the drift costs as it is.
    """

    edges: tuple[int, ...]
    compilations: int
    padding_share: float
    seconds: float
    unbucketed_seconds: float

    @property
    def saved_seconds(self) -> float:
        """What the edges save against compiling every size."""
        return round(self.unbucketed_seconds - self.seconds, 3)


def choose_edges(
    counts: Mapping[int, int],
    compile_seconds: float,
    unit_ms: float,
    max_buckets: int | None = None,
    largest: int | None = None,
) -> BucketChoice:
    """The edges that minimize compiling plus padding over `counts`.

    Args:
        counts: How many steps each size takes (over the steps to come).
        compile_seconds: One compilation's seconds (measured).
        unit_ms: A step's time per unit of the dimension (ms), measured:
            the median step over its median size.
        max_buckets: At most this many edges (None: as many as pay).
        largest: The largest edge whose program fits the device's memory
            (None: no limit). Sizes above it cannot be bucketed.

    Returns:
        The best `BucketChoice`.

    Raises:
        ValueError: Naming the argument, for no sizes, a negative cost,
            `max_buckets` under 1, or a size above `largest`.
    """
    sizes = sorted(s for s, n in counts.items() if n > 0)
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError(
            f"choose_edges(counts={dict(counts)!r}): pass positive sizes "
            "with their step counts, e.g. {16: 40, 23: 12}."
        )
    if compile_seconds < 0 or unit_ms < 0:
        raise ValueError(
            f"choose_edges(compile_seconds={compile_seconds!r}, "
            f"unit_ms={unit_ms!r}): pass measured times >= 0."
        )
    if max_buckets is not None and max_buckets < 1:
        raise ValueError(
            f"choose_edges(max_buckets={max_buckets!r}): pass at least 1, "
            "or None for as many as pay."
        )
    if largest is not None and sizes[-1] > largest:
        raise ValueError(
            f"choose_edges(largest={largest!r}): size {sizes[-1]} was seen; "
            "no edge that fits memory holds it."
        )
    unit_s = unit_ms / 1000.0
    k_max = len(sizes) if max_buckets is None else min(max_buckets, len(sizes))

    def run_cost(i: int, j: int) -> float:
        """Sizes i..j padded to sizes[j]: compiling once and the padding."""
        edge = sizes[j]
        pad = sum(counts[s] * (edge - s) for s in sizes[i : j + 1])
        return compile_seconds + pad * unit_s

    # best[k][j]: the cheapest cover of sizes[0..j] by k runs.
    inf = float("inf")
    best = [[inf] * len(sizes) for _ in range(k_max + 1)]
    cut = [[-1] * len(sizes) for _ in range(k_max + 1)]
    for j in range(len(sizes)):
        best[1][j] = run_cost(0, j)
    for k in range(2, k_max + 1):
        for j in range(k - 1, len(sizes)):
            for i in range(k - 1, j + 1):
                cost = best[k - 1][i - 1] + run_cost(i, j)
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    last = len(sizes) - 1
    k = min(range(1, k_max + 1), key=lambda n: (best[n][last], n))
    edges, j = [], last
    while k >= 1:
        edges.append(sizes[j])
        j, k = cut[k][j] - 1, k - 1
    edges.reverse()
    padded = real = 0
    for s in sizes:
        edge = next(e for e in edges if e >= s)
        padded += counts[s] * edge
        real += counts[s] * s
    return BucketChoice(
        edges=tuple(edges),
        compilations=len(edges),
        padding_share=round((padded - real) / padded, 4) if padded else 0.0,
        seconds=round(best[len(edges)][last], 3),
        unbucketed_seconds=round(compile_seconds * len(sizes), 3),
    )


def choose_for_run(
    sizes: Mapping[int, int],
    remaining_calls: int | None,
    compile_seconds: float,
    step_seconds: float,
    largest: int | None = None,
) -> BucketChoice:
    """The edges for the rest of a fit, from the sizes its calls ran so
    far (`sizes`: size -> calls), scaled to the `remaining_calls` (as
    many again where unknown), at one compilation's measured seconds and
    the typical step's (`step_seconds`, at the median size); within
    `largest` (`largest_fitting`: sizes above it are not bucketed)."""
    if largest is not None:
        sizes = {size: n for size, n in sizes.items() if size <= largest}
    seen = sum(sizes.values())
    scale = remaining_calls / max(seen, 1) if remaining_calls else 1.0
    every = [size for size, n in sizes.items() for _ in range(n)]
    median = statistics.median(every) if every else 1
    return choose_edges(
        {size: n * scale for size, n in sizes.items()},
        compile_seconds,
        step_seconds * 1000.0 / max(median, 1),
        largest=largest,
    )


def memory_line(program_bytes: Mapping[int, int]) -> tuple[float, float]:
    """`(fixed, per_unit)` bytes of a program at a size of the dimension,
    through the measured programs (`program_bytes`: size -> bytes; least
    squares): the weights do not grow with the size, the activations do.
    One size measured: all of it grows with the size (the cautious
    line)."""
    points = [(s, b) for s, b in program_bytes.items() if s > 0 and b]
    if not points:
        raise ValueError(
            f"memory_line(program_bytes={dict(program_bytes)!r}): pass "
            "at least one size with its program's bytes."
        )
    n = len(points)
    mean_s = sum(s for s, _ in points) / n
    mean_b = sum(b for _, b in points) / n
    spread = sum((s - mean_s) ** 2 for s, _ in points)
    if not spread:
        return 0.0, mean_b / mean_s
    per_unit = sum((s - mean_s) * (b - mean_b) for s, b in points) / spread
    return mean_b - per_unit * mean_s, per_unit


def projected_bytes(program_bytes: Mapping[int, int], size: int) -> int:
    """A program's bytes at `size`, on `memory_line`."""
    fixed, per_unit = memory_line(program_bytes)
    return int(fixed + per_unit * size)


def largest_fitting(
    program_bytes: Mapping[int, int],
    limit: int | None,
    share: float = MEMORY_SHARE,
) -> int | None:
    """The largest size whose program fits `share` of `limit` bytes (the
    rest is the allocator's and the other live buffers'), on
    `memory_line`; None where nothing limits it (no limit, nothing
    measured, or memory that does not grow with the size)."""
    points = {s: b for s, b in program_bytes.items() if s > 0 and b}
    if not limit or not points:
        return None
    fixed, per_unit = memory_line(points)
    if per_unit <= 0:
        return None
    return max(int((limit * share - fixed) // per_unit), 0)

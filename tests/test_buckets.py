"""Bucket edges chosen from measured costs: exact, and what they say."""

import itertools
import random

import pytest

from keras_xla.core.buckets import choose_edges

NER = {7: 30, 9: 25, 12: 20, 14: 8, 21: 4, 33: 2, 40: 1}  # sizes: steps


def brute_force(counts, compile_s, unit_ms, max_buckets=None):
    """The cheapest edges by trying every subset holding the largest."""
    sizes = sorted(counts)
    best = None
    for k in range(len(sizes)):
        for inner in itertools.combinations(sizes[:-1], k):
            edges = (*inner, sizes[-1])
            if max_buckets and len(edges) > max_buckets:
                continue
            pad = sum(
                n * (next(e for e in edges if e >= s) - s)
                for s, n in counts.items()
            )
            cost = compile_s * len(edges) + pad * unit_ms / 1000
            if best is None or cost < best[0] - 1e-12:
                best = (cost, edges)
    return best


def test_costly_compiles_pad_to_one_edge_and_cheap_ones_compile_each():
    one = choose_edges(NER, compile_seconds=30.0, unit_ms=0.5)
    assert one.edges == (40,) and one.compilations == 1
    every = choose_edges(NER, compile_seconds=0.001, unit_ms=50.0)
    assert every.edges == tuple(sorted(NER))
    assert every.padding_share == 0.0
    # Compiling each of 7 sizes at 30 s is what the drift costs now.
    assert one.unbucketed_seconds == 210.0
    assert one.saved_seconds == pytest.approx(210.0 - one.seconds)


def test_the_edges_are_the_cheapest_of_all():
    rng = random.Random(0)
    for _ in range(40):
        counts = {s: rng.randint(1, 30) for s in rng.sample(range(1, 60), 7)}
        compile_s, unit_ms = rng.uniform(0.1, 5.0), rng.uniform(0.1, 20.0)
        limit = rng.choice([None, 2, 3])
        got = choose_edges(counts, compile_s, unit_ms, max_buckets=limit)
        cost, edges = brute_force(counts, compile_s, unit_ms, limit)
        assert got.seconds == pytest.approx(cost, abs=2e-3)
        assert got.edges == edges
        assert got.edges[-1] == max(counts)
        assert limit is None or got.compilations <= limit


def test_what_the_edges_pad():
    choice = choose_edges({10: 3, 20: 1}, compile_seconds=100.0, unit_ms=1.0)
    # One edge, 20: three steps of 10 padded by 10 each.
    assert choice.edges == (20,)
    assert choice.padding_share == pytest.approx(30 / 80)
    assert choice.seconds == pytest.approx(100.0 + 30 * 0.001)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="counts="):
        choose_edges({}, 1.0, 1.0)
    with pytest.raises(ValueError, match="unit_ms=-1"):
        choose_edges({8: 1}, 1.0, -1)
    with pytest.raises(ValueError, match="max_buckets=0"):
        choose_edges({8: 1}, 1.0, 1.0, max_buckets=0)
    # A size whose program would not fit memory cannot be bucketed.
    with pytest.raises(ValueError, match="largest=32.*size 40"):
        choose_edges(NER, 1.0, 1.0, largest=32)


def test_a_runs_edges_scale_its_sizes_to_the_calls_left():
    from keras_xla.core.buckets import choose_for_run

    sizes = {10: 3, 20: 1}  # median size 10, a 5 ms step: 0.5 ms a unit
    few = choose_for_run(sizes, None, compile_seconds=1.0, step_seconds=0.005)
    # As many calls again: padding 3 calls by 10 units costs 0.015 s,
    # less than a second compilation.
    assert few.edges == (20,)
    many = choose_for_run(sizes, 4000, compile_seconds=1.0, step_seconds=0.005)
    # 3000 calls padded by 10 units would cost 15 s: two edges pay.
    assert many.edges == (10, 20)
    assert many.unbucketed_seconds == 2.0


def test_memory_projects_from_the_programs_measured():
    from keras_xla.core import buckets

    # 1000 bytes of weights, 50 a unit of the dimension.
    measured = {20: 2000, 40: 3000, 60: 4000}
    assert buckets.memory_line(measured) == (1000.0, 50.0)
    assert buckets.projected_bytes(measured, 100) == 6000
    # 90% of 10,000 bytes holds 8,000 of activations: 160 units.
    assert buckets.largest_fitting(measured, 10_000) == 160
    # One program measured: all of it grows with the size (cautious).
    assert buckets.largest_fitting({50: 5000}, 10_000) == 90
    # Nothing limits: no limit, nothing measured, flat memory.
    assert buckets.largest_fitting(measured, None) is None
    assert buckets.largest_fitting({}, 10_000) is None
    assert buckets.largest_fitting({20: 900, 40: 900}, 10_000) is None
    # Sizes above the largest are left out of the run's edges.
    sizes = {20: 5, 40: 5, 60: 5, 90: 2}
    choice = buckets.choose_for_run(sizes, 30, 2.0, 0.01, largest=70)
    assert max(choice.edges) <= 70 and 60 in choice.edges
    with pytest.raises(ValueError, match="program_bytes"):
        buckets.memory_line({})

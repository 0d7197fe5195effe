"""The same fits give the same reports on TensorFlow and on JAX: the
compilations per function, the recompilation list (function, input,
dimension, before, after, cause) and the findings, but for what
`ONE_BACKEND_ONLY` declares and the lints on measured
times.

Each backend runs `parity_run.py` in its own process (JAX's without
TensorFlow importable), every scenario in one process.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

HERE = os.path.dirname(os.path.abspath(__file__))


# What exists on one backend only, and why: finding codes, and the
# report's fields (`section` or `section.key`). The parity tests allow
# these differences between the same fit's reports on the two backends,
# and no others.
ONE_BACKEND_ONLY = {
    "jit-disabled-by-determinism": (
        "tensorflow",
        "TensorFlow's op determinism turns XLA off; JAX has no such switch",
    ),
    "jit-disabled-by-strategy": (
        "tensorflow",
        "tf.distribute keeps Keras's jit_compile off; keras.distribution "
        "on JAX compiles the whole step",
    ),
    "unsupported-op": (
        "tensorflow",
        "ops without an XLA kernel exist in TensorFlow; every JAX op "
        "lowers to XLA",
    ),
    "auto-clustering-inactive": ("tensorflow", "auto-clustering is TF's"),
    "auto-clustering-uncounted": ("tensorflow", "auto-clustering is TF's"),
    "tensor-core-alignment": (
        "tensorflow",
        "it reads the GPUs through TensorFlow",
    ),
    "profiler-busy": ("tensorflow", "profile_steps uses TF's profiler"),
    "compile-cache-corrupt": (
        "tensorflow",
        "TensorFlow's cache is mirrored through its in-memory ledger, "
        "whose entries keras_xla reads; JAX reads its own cache",
    ),
    "compile-ledger-off": ("tensorflow", "the ledger is TensorFlow's"),
    "compile-cache-not-saved": (
        "tensorflow",
        "keras_xla writes TensorFlow's mirrored entries; JAX writes its own",
    ),
    "folded-dimensions": (
        "tensorflow",
        "the in-graph probe's limit; JAX's tap reads every dimension",
    ),
    "indivisible-batch": (
        "jax",
        "keras.distribution's data iterator; tf.distribute pads instead",
    ),
    "backend-unsupported": (
        "jax",
        "a TensorFlow feature asked for on JAX (XLAModel, profile_steps)",
    ),
    "clustering": ("tensorflow", "auto-clustering is TF's"),
    "profile": ("tensorflow", "profile_steps uses TF's profiler"),
    # The figures of `core.figures.APART` (the dispatch).
    "timed apart": (
        "jax",
        "JAX's call returns before its results exist: the host's part is "
        "timed apart; on TensorFlow the call returns with the results",
    ),
}


def run(backend, log_dir):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_XLA_FLAGS", "XLA_FLAGS", "KERAS_BACKEND")
    }
    env["KERAS_BACKEND"] = backend
    env["JAX_PLATFORMS"] = "cpu"
    code = [sys.executable, os.path.join(HERE, "parity_run.py"), log_dir]
    if backend == "jax":  # the JAX path must not import TensorFlow
        code = [
            sys.executable,
            "-c",
            "import runpy, sys; sys.modules['tensorflow'] = None; "
            f"sys.argv = {code[1:]!r}; "
            "runpy.run_path(sys.argv[0], run_name='__main__')",
        ]
    proc = subprocess.run(
        code, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Lints on measured times: the same fit is faster on one backend.
TIMED = {
    "tuner-overhead",
    "dispatch-bound-steps",
    "compile-dominates",
    "input-bound",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    tf_run = run("tensorflow", str(root / "tf"))
    jax_run = run("jax", str(root / "jax"))
    assert (tf_run["backend"], jax_run["backend"]) == ("tensorflow", "jax")
    return tf_run, jax_run


def same(tf_run, jax_run, scenario):
    """The scenario's compilations per function, recompilations and
    finding codes on both backends (timed lints aside; a code of one
    backend only is declared in `ONE_BACKEND_ONLY`)."""
    a, b = tf_run[scenario], jax_run[scenario]
    assert a["compilations"] == b["compilations"], scenario
    assert a["recompilations"] == b["recompilations"], scenario
    codes = {"tensorflow": set(a["codes"]), "jax": set(b["codes"])}
    for backend, other in (("tensorflow", "jax"), ("jax", "tensorflow")):
        for code in codes[backend] - codes[other] - TIMED:
            declared = ONE_BACKEND_ONLY.get(code, (None,))[0]
            assert declared == backend, (scenario, backend, code)
    return a


def test_a_partial_last_batch_the_baseline_saw_first(runs):
    tf_run, jax_run = runs
    # The no-XLA baseline ran on both, before XLA met the short batches.
    assert tf_run["partial"]["baseline_steps"] > 0
    assert jax_run["partial"]["baseline_steps"] > 0
    found = same(*runs, "partial")
    assert found["compilations"] == {"train": 2, "test": 2}
    assert found["recompilations"] == PARTIAL
    # The HLO was analyzed on both, once an epoch ended with XLA's step
    # on the model (the baseline's windows span the first).
    assert "hlo-analysis-off" not in found["codes"]
    assert "hlo-analysis-off" not in jax_run["partial"]["codes"]


PARTIAL = [
    ["test", "x", 0, [32, 8], [6, 8], "partial_batch"],
    ["train", "x", 0, [32, 8], [8, 8], "partial_batch"],
]


def test_steps_per_execution(runs):
    found = same(*runs, "spe")
    assert found["compilations"] == {"train": 2, "test": 2}
    assert found["recompilations"] == PARTIAL


def test_padded_lengths(runs):
    found = same(*runs, "padded")
    # Lengths 8, 12, 8, 16, 12: three compile.
    assert found["compilations"] == {"train": 3}
    assert found["recompilations"] == [
        ["train", "x", 1, [4, 8], [4, 12], "dynamic_dim"],
        ["train", "x", 1, [4, 12], [4, 16], "dynamic_dim"],
    ]


def test_a_second_fit_on_the_same_model(runs):
    tf_run, jax_run = runs
    for i in range(2):
        tf_fit, jax_fit = tf_run["second_fit"][i], jax_run["second_fit"][i]
        same({"s": tf_fit}, {"s": jax_fit}, "s")
    assert tf_run["second_fit"][0]["compilations"] == {"train": 1}
    assert tf_run["second_fit"][1]["compilations"] == {"train": 0}


def test_unknown_length_data(runs):
    found = same(*runs, "unknown")
    assert found["compilations"] == {"train": 1}
    assert found["recompilations"] == []


def test_auto_tries_the_same_candidates(runs):
    tf_run, jax_run = runs
    # Which one wins is measured (each backend's own speed): the same
    # candidates are tried, and the same shapes explained.
    assert tf_run["auto"]["candidates"] == jax_run["auto"]["candidates"]
    assert tf_run["auto"]["candidates"] == ["no_xla/float32", "xla/float32"]
    for r in runs:
        assert r["auto"]["recompilations"] in ([], PARTIAL)


def test_the_compile_cache(runs):
    found = same(*runs, "cache")
    assert found["compilations"] == {"train": 2, "test": 2}
    for r in runs:
        assert (r["cache"]["hits"], r["cache"]["misses"]) == (0, 4)


def test_a_recompilation_storm_falls_back_to_no_xla(runs):
    for r in runs:
        storm = r["storm"]
        guard = storm["guard"]
        # After the budget (8 recompilations): the ninth, in a stream of
        # lengths that never repeat, is a storm.
        assert guard["action"] == "fallback"
        assert guard["recompilations"] == 9
        assert (guard["input"], guard["dim"]) == ("x", 1)
        assert guard["cause"] == "dynamic_dim"
        assert guard["compiled"] >= guard["window"] / 2
        assert storm["compilations"] == {"train": 10}
        # No XLA from the step after the storm's call: nothing compiles
        # after it, and every step trained.
        epoch, step = guard["off_from"]
        assert epoch == 0 and guard["step"] < step <= guard["step"] + 2
        assert max(storm["compiled_at"]) < step
        assert storm["steps"] == 30
        assert storm["jit_enabled"] is False
        assert "recompile-storm" in storm["codes"]
        # What the fallback avoided is what its twin, whose guard only
        # warned, compiled from that step on: every new length after it.
        twin = r["storm_warn"]
        after = [s for s in twin["compiled_at"] if s >= step]
        assert guard["projected_compilations"] == len(after) == 30 - step
        each = guard["compile_seconds"] / guard["recompilations"]
        assert guard["projected_seconds"] == pytest.approx(
            len(after) * each, abs=0.01
        )
        # The weights are a fit's without XLA (float rounding apart).
        assert storm["weights_apart"] < 1e-5
    tf_guard, jax_guard = (r["storm"]["guard"] for r in runs)
    for key in ("action", "budget", "recompilations", "input", "dim"):
        assert tf_guard[key] == jax_guard[key], key
    for key in ("step", "off_from", "values"):
        assert tf_guard[key] == jax_guard[key], key
    tf_storm, jax_storm = (r["storm"] for r in runs)
    assert tf_storm["compiled_at"] == jax_storm["compiled_at"]
    assert tf_storm["compiled_at"] == list(range(10))


def test_a_recompilation_storm_raises_or_warns_as_asked(runs):
    for r in runs:
        raised = r["storm_raise"]
        assert raised["guard"]["action"] == "raise"
        assert "input `x`, dimension 1" in raised["raised"]
        assert "Fix: " in raised["raised"]
        # It stopped the fit before the next step; the report was written.
        assert raised["steps"] <= raised["guard"]["step"] + 2 < 30
        assert raised["compilations"] == {"train": 10}
        warned = r["storm_warn"]
        assert warned["guard"]["action"] == "warn"
        assert warned["jit_enabled"] is True
        assert warned["steps"] == 30
        # Every new length compiled, past the storm's step: XLA stayed on.
        assert warned["guard"]["step"] < 13
        assert warned["compilations"] == {"train": 30}
        assert "recompile-storm" in warned["codes"]


def test_per_shape_keeps_xla_for_the_shapes_it_compiled(runs):
    for r in runs:
        run = r["per_shape"]
        guard = run["guard"]
        assert guard["action"] == "per_shape"
        epoch, step = guard["off_from"]
        assert (epoch, step) == (0, guard["step"] + 1)
        # Before the storm each new length compiled; after it none did,
        # and no known one compiled again: XLA's own record agrees.
        assert run["compilations"] == {"train": step}
        assert run["compiled_at"] == list(range(step))
        if run["xla_written"] is not None:
            assert run["xla_written"] == step
        assert guard["kept_shapes"] == step
        # From `step` on, the lengths XLA had compiled ran its program,
        # the others ran without XLA; every step trained.
        before, lengths = run["lengths"][:step], run["lengths"][step:]
        known = [n for n in lengths if n in before]
        assert guard["xla_steps"] == len(known) > 0
        assert guard["plain_steps"] == len(lengths) - len(known) > 0
        assert guard["xla_seconds"] > 0 and guard["plain_seconds"] > 0
        assert guard["projected_compilations"] == len(
            set(lengths) - set(before)
        )
        assert run["steps"] == len(run["lengths"])
        assert run["jit_enabled"] is True
        assert run["weights_apart"] < 1e-5
        # Nothing the tuner did compiled (its HLO analysis reads a shape
        # XLA compiled, not one that ran without XLA).
        assert run["outside"] == []


def test_bucket_pads_to_the_chosen_edges_and_keeps_the_result(runs):
    for r in runs:
        for name in ("bucket", "bucket_tokens"):
            run = r[name]
            guard = run["guard"]
            assert guard["action"] == "bucket", name
            epoch, step = guard["off_from"]
            assert (epoch, step) == (0, guard["step"] + 1)
            edges = guard["edges"]
            assert edges == sorted(edges) and len(edges) <= 8
            assert set(guard["grown"]) <= set(edges)
            assert 0.0 <= guard["padding_share"] < 1.0
            # After the switch each edge compiled once and nothing else
            # did: every batch ran XLA's program of its edge (the pooled
            # model's batches keep their structure: an edge compiled
            # before the storm is not compiled again).
            compiled = run["compiled_shapes"]
            before = {s["x"][1] for at, s in compiled if at < step}
            after = sorted(s["x"][1] for at, s in compiled if at >= step)
            new = set(edges) - (before if name == "bucket" else set())
            assert after == sorted(new), name
            if run["xla_written"] is not None:
                assert run["xla_written"] == step + len(new)
            assert run["steps"] == len(run["lengths"])
            assert run["jit_enabled"] is True
            # The padding is masked, the padded labels weighted out: the
            # result is the unpadded fit's without XLA.
            assert run["weights_apart"] < 1e-5, name
            losses, plain = run["losses"]
            assert losses == pytest.approx(plain, abs=1e-5), name
            assert "bucket-refused" not in run["codes"]
            # The edges' compilations are the plan's, not explained as the
            # pipeline's (no `new-input` for the added sample weights).
            assert "new-input" not in run["codes"]
        tokens = r["bucket_tokens"]["compiled_shapes"]
        padded = [shapes for at, shapes in tokens if "sample_weight" in shapes]
        assert padded and all(s["sample_weight"] == s["y"] for s in padded)
        # A model that does not mask its padding is not padded: per shape.
        refused = r["bucket_refused"]
        assert refused["guard"]["action"] == "per_shape"
        assert "bucket-refused" in refused["codes"]
        assert refused["steps"] == len(refused["lengths"])
    tf_run, jax_run = (r["bucket"]["guard"] for r in runs)
    assert tf_run["step"] == jax_run["step"]


def test_the_compile_log_keeps_each_program_memory(runs):
    for r in runs:
        # Every train compilation's program, as XLA assigned its memory:
        # a longer batch's program is larger.
        run = r["bucket_refused"]
        sizes = [s["x"][1] for _, s in run["compiled_shapes"]]
        memory = run["program_bytes"]
        assert all(isinstance(b, int) and b > 0 for b in memory)
        by_size = sorted(zip(sizes, memory))
        assert [b for _, b in by_size] == sorted(b for _, b in by_size)
        assert by_size[-1][1] > by_size[0][1]


def test_bucket_keeps_each_program_within_the_device_memory(runs):
    from keras_xla.core import buckets, hardware

    # Both backends see this machine's memory for the CPU's programs,
    # and the guard planned within it.
    memory = hardware.host_memory_bytes()
    for r in runs:
        assert r["device_memory"] == memory
        assert r["bucket"]["guard"]["memory_limit_bytes"] == memory
    for r in runs:
        run = r["bucket_memory"]
        guard = run["guard"]
        assert guard["action"] == "bucket"
        step = guard["off_from"][1]
        # The largest length that fits is the one the device was made to
        # hold, projected from the programs the storm compiled.
        measured = {
            s["x"][1]: b
            for (at, s), b in zip(run["compiled_shapes"], run["program_bytes"])
            if at < step
        }
        largest = buckets.largest_fitting(measured, run["limit"])
        assert guard["largest_fitting"] == largest
        assert guard["memory_limit_bytes"] == run["limit"]
        assert 28 <= largest <= 32
        assert max(guard["edges"]) <= largest
        assert all(
            b <= run["limit"] * buckets.MEMORY_SHARE
            for b in guard["edge_bytes"]
        )
        # Longer batches ran without XLA and compiled nothing; every step
        # trained, to the unpadded no-XLA fit's weights.
        after = [s["x"][1] for at, s in run["compiled_shapes"] if at >= step]
        assert after and max(after) <= largest
        assert guard["plain_steps"] == sum(
            n > largest for n in run["lengths"][step:]
        )
        assert guard["plain_steps"] > 0
        assert run["steps"] == len(run["lengths"])
        assert run["weights_apart"] < 1e-5


def test_a_few_buckets_under_the_budget_are_untouched(runs):
    for r in runs:
        buckets = r["buckets"]
        assert buckets["guard"] is None
        assert "recompile-storm" not in buckets["codes"]
        assert buckets["jit_enabled"] is True
        assert buckets["compilations"] == {"train": 6}
        assert buckets["steps"] == 30
    # Under the budget, the recompilations of `padded` and `partial` too.
    for r in runs:
        assert "recompile-storm" not in r["padded"]["codes"]
        assert "recompile-storm" not in r["partial"]["codes"]

"""XLATuner against the TF profiler's ground truth, on tiny CPU models."""

import json
import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import conv_model, quiet_fit, regression_data

from keras_xla import XLARecompilationWarning, XLATuner
from keras_xla.core.summaries import (
    FINDINGS_TAG,
    HLO_TAGS,
    REPORT_TAG,
    SCALAR_TAGS,
    STEP_TIME_TAG,
    VERDICT_TAG,
    WAIT_TAGS,
)

fit = quiet_fit


def test_partial_batches_in_train_and_validation(profiled):
    x, y = regression_data(70)
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events:
        fit(
            model,
            x,
            y,
            batch_size=16,
            epochs=2,
            tuner=tuner,
            validation_data=(x[:20], y[:20]),
        )
    report = tuner.report
    assert report.jit.enabled is True
    # train: 16 and 6; test: 16 and 4 -> four compilations, all in epoch 0.
    assert [e.compilations for e in report.epochs] == [4, 0]
    assert report.total_compilations == len(events) == 4
    assert [e.recompilations for e in report.epochs] == [2, 0]
    by_fn = {r.function: r for r in report.recompilations}
    train, test = by_fn["train"], by_fn["test"]
    assert (
        train.input,
        train.dim,
        train.before,
        train.after,
        train.cause,
        train.epoch,
        train.step,
    ) == ("x", 0, [16, 16, 4], [6, 16, 4], "partial_batch", 0, 4)
    assert (test.input, test.before, test.after, test.cause, test.step) == (
        "x",
        [16, 16, 4],
        [4, 16, 4],
        "partial_batch",
        1,
    )
    assert "drop_remainder=True" in train.fix
    assert report.finding_codes().count("partial-last-batch") == 2
    # 10 steps of ~2 ms against ~1 s of compiling: said, too.
    assert "compile-dominates" in report.finding_codes()
    assert report.epochs[0].steps == 5
    assert report.epochs[1].examples_per_second > 0
    # In time order: train 16, train 6, then validation's 16 and 4.
    log = report.compile_log
    assert [(c.function, c.first) for c in log] == [
        ("train", True),
        ("train", False),
        ("test", True),
        ("test", False),
    ]
    assert all(c.compile_seconds > 0.01 for c in report.compile_log)
    assert report.epochs[0].compile_seconds == pytest.approx(
        sum(c.compile_seconds for c in report.compile_log), abs=1e-3
    )


def token_dataset(lengths, batch_size=4, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 50, size=n) for n in lengths]
    ds = tf.data.Dataset.from_generator(
        lambda: ((s, np.float32(len(s) % 2)) for s in seqs),
        output_signature=(
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([], tf.float32),
        ),
    )
    return ds.padded_batch(batch_size)


def text_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int64"),
            keras.layers.Embedding(50, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile("adam", "binary_crossentropy")
    return model


def test_padded_sequences_compile_once_per_length(profiled):
    # Batches of 4: max lengths 5, 9, 5, 12 -> three distinct shapes.
    lengths = [3, 5, 2, 4, 9, 1, 2, 3, 5, 5, 4, 1, 12, 3, 2, 2]
    model = text_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model.fit(
            token_dataset(lengths), epochs=2, verbose=0, callbacks=[tuner]
        )
    report = tuner.report
    assert report.total_compilations == len(events) == 3
    assert [e.compilations for e in report.epochs] == [3, 0]
    recs = report.recompilations
    assert [(r.input, r.dim, r.before, r.after, r.cause) for r in recs] == [
        ("x", 1, [4, 5], [4, 9], "dynamic_dim"),
        ("x", 1, [4, 9], [4, 12], "dynamic_dim"),
    ]
    assert "bucket_by_length" in recs[0].fix
    ours = [x for x in w if issubclass(x.category, XLARecompilationWarning)]
    # One warning per distinct (function, input, dim, cause).
    assert len(ours) == 1
    assert "dim 1" in str(ours[0].message)
    # One finding for the dimension (a busy machine may add one about the
    # step's speed, never another about the shapes).
    (finding,) = [
        f for f in report.findings if f.code in ("dynamic-dimension", "retrace")
    ]
    assert (finding.code, finding.count) == ("dynamic-dimension", 2)


def test_steps_per_execution(profiled):
    x, y = regression_data(70)
    model = conv_model(steps_per_execution=4)
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events:
        fit(
            model,
            x,
            y,
            batch_size=16,
            epochs=2,
            tuner=tuner,
            validation_data=(x[:36], y[:36]),
        )
    report = tuner.report
    assert report.total_compilations == len(events) == 4
    assert report.epochs[0].steps == 5
    train = [r for r in report.recompilations if r.function == "train"]
    assert [(r.step, r.after, r.cause) for r in train] == [
        (4, [6, 16, 4], "partial_batch")
    ]
    test = [r for r in report.recompilations if r.function == "test"]
    assert [(r.step, r.after, r.cause) for r in test] == [
        (2, [4, 16, 4], "partial_batch")
    ]


def test_second_fit_reuses_compiled_shapes(profiled):
    x, y = regression_data(64)
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as first:
        fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    assert tuner.report.total_compilations == len(first) == 1
    with profiled() as second:
        fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    assert tuner.report.total_compilations == len(second) == 0
    fresh = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as third:
        fit(model, x, y, batch_size=32, epochs=1, tuner=fresh)
    assert fresh.report.total_compilations == len(third) == 1
    (rec,) = fresh.report.recompilations
    assert (rec.cause, rec.before, rec.after) == (
        "batch_size",
        [16, 16, 4],
        [32, 16, 4],
    )


def read_events(run_dir):
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(
        run_dir, size_guidance={event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    return {tag: acc.Tensors(tag) for tag in acc.Tags()["tensors"]}


def test_tensorboard_tags_and_report_file(tmp_path):
    x, y = regression_data(48)
    log_dir = str(tmp_path / "logs")
    tuner = XLATuner(log_dir=log_dir, verbose=0)
    fit(conv_model(), x, y, batch_size=16, epochs=3, tuner=tuner)
    events = read_events(os.path.join(log_dir, "train"))
    # The wait for each batch is seen (one step per call, one replica).
    seen = set(SCALAR_TAGS) | set(HLO_TAGS) | set(WAIT_TAGS)
    assert set(events) == seen | {
        FINDINGS_TAG,
        VERDICT_TAG,
        STEP_TIME_TAG,
        REPORT_TAG,  # the XLA tab's data
    }
    for tag in set(SCALAR_TAGS) | set(HLO_TAGS):
        assert [p.step for p in events[tag]] == [0, 1, 2], tag
    # Per call at the global train step; texts when they change.
    assert [p.step for p in events[STEP_TIME_TAG]] == list(range(9))
    assert [p.step for p in events[FINDINGS_TAG]][0] == 0
    step_ms = [
        float(tf.make_ndarray(p.tensor_proto)) for p in events[STEP_TIME_TAG]
    ]
    assert max(step_ms) == step_ms[0]  # the compiling call stands out
    compiles = [
        float(tf.make_ndarray(p.tensor_proto))
        for p in events["xla/compilations"]
    ]
    assert compiles == [1.0, 0.0, 0.0]
    text = tf.make_ndarray(events[FINDINGS_TAG][0].tensor_proto)
    assert text.item().decode().startswith("| code | severity |")
    with open(os.path.join(log_dir, "xla_report.json")) as f:
        data = json.load(f)
    assert data["schema"] == "keras_xla.report/1"
    assert [e["compilations"] for e in data["epochs"]] == [1, 0, 0]
    assert data["jit"]["enabled"] is True


def test_side_by_side_with_keras_tensorboard(tmp_path):
    x, y = regression_data(32)
    log_dir = str(tmp_path / "logs")
    model = conv_model()
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[
            keras.callbacks.TensorBoard(log_dir=log_dir),
            XLATuner(log_dir=log_dir, verbose=0),
        ],
    )
    tags = set(read_events(os.path.join(log_dir, "train")))
    assert {"epoch_loss", "xla/compilations"} <= tags


def test_history_and_csv_logger_see_the_epoch_figures(tmp_path):
    import csv

    x, y = regression_data(40)  # batches of 16, 16, 8: two signatures
    csv_path = str(tmp_path / "log.csv")
    tuner = XLATuner(verbose=0, analyze_hlo=False, baseline=False)
    history = conv_model().fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[tuner, keras.callbacks.CSVLogger(csv_path)],
    )
    counts = [e.compilations for e in tuner.report.epochs]
    assert counts == [2, 0]
    # Every figure TensorFlow measures, as on TensorBoard, and no other.
    figures = {k for k in history.history if k.startswith("xla/")}
    assert figures == set(SCALAR_TAGS) | set(WAIT_TAGS)
    assert history.history["xla/compilations"] == counts
    assert history.history["xla/recompilations"] == [1, 0]
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert [float(r["xla/compilations"]) for r in rows] == counts
    assert [float(r["xla/jit_compile"]) for r in rows] == [1.0, 1.0]
    # Turned off, Keras's logs hold only Keras's own figures.
    quiet = XLATuner(verbose=0, analyze_hlo=False, add_to_logs=False)
    history = conv_model().fit(
        x, y, batch_size=16, epochs=1, verbose=0, callbacks=[quiet]
    )
    assert set(history.history) == {"loss"}


def test_string_lookup_reports_disabled_and_trains(tmp_path):
    from test_jit import lookup_dataset, lookup_model

    model = lookup_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    history = fit(model, lookup_dataset(), epochs=2, tuner=tuner)
    assert len(history.history["loss"]) == 2
    report = tuner.report
    assert report.jit.enabled is False
    assert "vocab (StringLookup)" in report.jit.reason
    assert "jit-disabled-by-layer" in report.finding_codes()
    assert report.total_compilations == 0
    assert report.epochs[0].steps == 2


def test_reuse_in_memory_and_jit_off():
    x, y = regression_data(32)
    model = conv_model()
    tuner = XLATuner(jit_compile=False, verbose=0)
    fit(model, x, y, batch_size=16, epochs=2, tuner=tuner)
    assert tuner.report.jit.enabled is False
    assert model.jit_compile is False
    assert tuner.report.total_compilations == 0
    tuner.jit_compile = True
    fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    assert len(tuner.report.epochs) == 1  # state reset per fit
    assert tuner.report.jit.enabled is True
    assert tuner.report.total_compilations == 1


def traced_model(traces):
    """`conv_model`'s layers after one that notes each Python trace of a
    16-row batch (the steps'; the unsupported-op check traces one row)."""

    class Noting(keras.layers.Layer):
        def call(self, x):
            if x.shape[0] == 16:
                traces.append(x.shape)
            return x

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 4)),
            Noting(),
            keras.layers.Conv1D(8, 3),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=False)
    return model


@pytest.mark.parametrize("share", [True, False])
def test_xla_built_after_no_xla_calls_its_traced_step(profiled, share):
    # Forced either way (by default, sharing waits for a fit that builds
    # both: see the next test).
    from keras_xla.tf_backend.step_functions import StepFunctions

    x, y = regression_data(32)
    traces = []
    model = traced_model(traces)
    StepFunctions.of(model).share = share
    tuner = XLATuner(jit_compile=False, verbose=0, analyze_hlo=False)
    fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    before = len(traces)
    tuner.jit_compile = True
    with profiled() as events:
        hist = fit(model, x, y, batch_size=16, epochs=2, tuner=tuner)
    # Shared: the XLA step calls the no-XLA one's trace and XLA compiles
    # the whole step through the call, once, as the profiler counts.
    assert len(traces) - before == (0 if share else 1)
    assert tuner.report.total_compilations == len(events) == 1
    assert tuner.report.jit.enabled is True
    assert int(model.optimizer.iterations.numpy()) == 2 + 4
    assert np.isfinite(hist.history["loss"]).all()
    # Back to no XLA: its function is reused, nothing traced or compiled.
    tuner.jit_compile = False
    with profiled() as events:
        fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    assert len(traces) - before == (0 if share else 1)
    assert tuner.report.total_compilations == len(events) == 0


def test_only_a_fit_that_builds_both_ways_shares_the_trace(profiled):
    from keras_xla.tf_backend.step_functions import StepFunctions

    # The baseline window builds the no-XLA twin of the XLA step: by
    # default it calls XLA's trace, one trace fewer than unshared.
    x, y = regression_data(16 * 40)
    counts = {}
    for share in (None, False):
        traces = []
        model = traced_model(traces)
        StepFunctions.of(model).share = share
        tuner = XLATuner(jit_compile=True, verbose=0, analyze_hlo=False)
        with profiled() as events:
            fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
        assert tuner.report.baseline.run_steps > 0
        assert tuner.report.total_compilations == len(events) == 1
        counts[share] = len(traces)
    assert counts[None] == counts[False] - 1
    # A plain fit builds one way and traces as Keras does; a later fit's
    # other way then traces its own.
    traces = []
    model = traced_model(traces)
    plain = XLATuner(jit_compile=False, verbose=0, analyze_hlo=False)
    fit(model, x, y, batch_size=16, epochs=1, tuner=plain)
    before = len(traces)
    plain.jit_compile = True
    plain.baseline = False
    fit(model, x, y, batch_size=16, epochs=1, tuner=plain)
    assert len(traces) == before + 1


def test_tuner_failure_never_stops_training(monkeypatch):
    from keras_xla.tf_backend import probe as probe_lib

    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(probe_lib.ShapeProbe, "read_new", broken)
    x, y = regression_data(32)
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with pytest.warns(UserWarning, match="tuner-error"):
        history = conv_model().fit(
            x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
        )
    assert len(history.history["loss"]) == 2
    assert "tuner-error" in tuner.report.finding_codes()
    strict = XLATuner(strict=True, verbose=0)
    with pytest.raises(RuntimeError, match="boom"):
        conv_model().fit(
            x, y, batch_size=16, epochs=1, verbose=0, callbacks=[strict]
        )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"jit_compile": "yes"}, r"XLATuner\(jit_compile='yes'\)"),
        ({"verbose": 2}, r"XLATuner\(verbose=2\)"),
        ({"log_dir": 3}, r"XLATuner\(log_dir=3\)"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        XLATuner(**kwargs)


def test_summary_is_printed_at_train_end(capsys):
    x, y = regression_data(32)
    fit(conv_model(), x, y, batch_size=16, epochs=1, tuner=XLATuner())
    out = capsys.readouterr().out
    assert "XLA on" in out
    assert "compiles" in out and "median ms" in out


def test_mixed_precision_applied_and_checked():
    x, y = regression_data(32)
    model = conv_model()
    # keep=True: the model keeps the policy after the fit, to be read here.
    tuner = XLATuner(
        verbose=0,
        analyze_hlo=False,
        mixed_precision="mixed_bfloat16",
        keep=True,
    )
    history = fit(model, x, y, batch_size=16, epochs=2, tuner=tuner)
    assert np.isfinite(history.history["loss"]).all()
    assert model.layers[0].compute_dtype == "bfloat16"  # Conv1D
    assert model.layers[-1].compute_dtype == "float32"  # output Dense
    assert model.trainable_weights[0].dtype == "float32"
    assert tuner.report.environment["policy"] == "mixed_bfloat16"
    # Global policy changed after the build: the tuner says so.
    plain = conv_model()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        checker = XLATuner(verbose=0, analyze_hlo=False)
        fit(plain, x, y, batch_size=16, epochs=1, tuner=checker)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert "policy-set-after-build" in checker.report.finding_codes()
    with pytest.raises(ValueError, match=r"mixed_precision='mixed_int3'"):
        XLATuner(mixed_precision="mixed_int3")


def test_second_tuner_on_one_fit_stands_aside_and_says_so(profiled):
    x, y = regression_data(40)  # batches of 16, 16, 8
    model = conv_model()
    first = XLATuner(verbose=0, analyze_hlo=False)
    second = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = model.fit(
            x, y, batch_size=16, epochs=2, verbose=0, callbacks=[first, second]
        )
    assert len(history.history["loss"]) == 2
    assert int(model.optimizer.iterations) == 6  # every step trained
    # The first tuner counts what the profiler saw; the second says why it
    # has nothing.
    assert first.report.total_compilations == len(events) == 2
    assert "duplicate-tuner" not in first.report.finding_codes()
    assert second.report.finding_codes() == ["duplicate-tuner"]
    (finding,) = second.report.findings
    assert "Pass one XLATuner" in finding.fix
    assert second.report.epochs == []
    # Alone on the next fit, the second tuner works.
    with profiled() as again, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[second])
    assert second.report.finding_codes().count("duplicate-tuner") == 0
    assert len(second.report.epochs) == 1
    assert second.report.total_compilations == len(again)


def test_no_spike_without_a_compilation_over_three_epochs(
    tmp_path, monkeypatch, epoch_records
):
    # Keras's work after an epoch's last call (the end of the data, the
    # next epoch's iterator, the epoch's metrics) is not that step's
    # time. Planted: 0.2 s more of it, 100x a step here.
    import time

    trainer = type(conv_model())
    metrics_result = trainer._get_metrics_result_or_logs

    def slow_epoch_end(self, logs):
        time.sleep(0.2)
        return metrics_result(self, logs)

    monkeypatch.setattr(trainer, "_get_metrics_result_or_logs", slow_epoch_end)
    taken = epoch_records
    x, y = regression_data(32 * 20)
    log_dir = str(tmp_path / "logs")
    tuner = XLATuner(log_dir=log_dir, verbose=0, analyze_hlo=False)
    fit(conv_model(), x, y, batch_size=32, epochs=3, tuner=tuner)
    events = read_events(os.path.join(log_dir, "train"))
    step_ms = {
        p.step: float(tf.make_ndarray(p.tensor_proto))
        for p in events[STEP_TIME_TAG]
    }
    assert sorted(step_ms) == list(range(60))
    median = float(np.median(list(step_ms.values())))

    def steps(which):
        return {
            20 * epoch + r.first_step
            for epoch, records in enumerate(taken)
            for r in records
            if which(r)
        }

    compiled = steps(lambda r: r.compiled)
    # The baseline windows' no-XLA calls (the first builds its graph)
    # are warm-ups, not steady XLA steps: all in the first epoch.
    warmup = steps(lambda r: r.warmup and not r.compiled)
    assert compiled == {0} and warmup and max(warmup) < 20
    # A generous factor: what stands out is a compilation (or that first
    # call), nothing else.
    standing_out = {s for s, t in step_ms.items() if t > 20 * median}
    assert standing_out <= compiled | warmup and 0 in standing_out
    last_steps = [step_ms[s] for s in (19, 39, 59)]
    assert max(last_steps) < 10 * median

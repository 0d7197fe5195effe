"""What a fit reports on real input patterns, against the TF profiler:
causes that point at the right fix, Keras's end-of-data call, and
compilations outside the fit."""

import tensorflow as tf
from conftest import conv_model, quiet_fit, regression_data
from test_tuner import text_model, token_dataset

from keras_xla import XLATuner


def test_short_padded_last_batch_is_a_partial_batch(profiled):
    # Batches of 4 padded to 9, 9, then a last batch of 2 padded to 3.
    lengths = [9, 2, 3, 4, 5, 9, 1, 2, 3, 1]
    model, tuner = text_model(), XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events:
        quiet_fit(model, token_dataset(lengths, 4), tuner=tuner, epochs=1)
    report = tuner.report
    assert report.total_compilations == len(events) == 2
    (recompilation,) = report.recompilations
    assert recompilation.cause == "partial_batch"
    assert (recompilation.before, recompilation.after) == ([4, 9], [2, 3])
    causes = {(c["input"], c["dim"], c["cause"]) for c in recompilation.changes}
    assert ("x", 0, "partial_batch") in causes
    assert ("x", 1, "dynamic_dim") in causes
    codes = report.finding_codes()
    assert "partial-last-batch" in codes and "dynamic-dimension" in codes
    assert "batch-size-change" not in codes


def generator_data(n, batch_size):
    x, y = regression_data(n)
    ds = tf.data.Dataset.from_generator(
        lambda: zip(x, y),
        output_signature=(
            tf.TensorSpec([16, 4], tf.float32),
            tf.TensorSpec([1], tf.float32),
        ),
    )
    return ds.batch(batch_size)


def test_unknown_cardinality_end_of_data_call_is_not_a_step(profiled):
    # 18 examples in batches of 4: five batches, the last one of 2.
    model, tuner = conv_model(), XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events:
        quiet_fit(model, generator_data(18, 4), tuner=tuner, epochs=2)
    report = tuner.report
    assert [e.steps for e in report.epochs] == [5, 5]
    assert int(model.optimizer.iterations.numpy()) == 10
    assert report.total_compilations == len(events) == 2
    (recompilation,) = report.recompilations
    assert (recompilation.cause, recompilation.step) == ("partial_batch", 4)
    assert "batch-size-change" not in report.finding_codes()
    # The steady figures hold only real steps: examples/s agrees with
    # the batch over the median step.
    second = report.epochs[1]
    median_s = second.step_time_ms["median"] / 1000.0
    assert second.examples_per_second < 2.5 * 4 / median_s


def test_evaluate_between_fits_is_not_booked_to_the_next_fit(profiled):
    x, y = regression_data(32)
    model = conv_model()
    # keep=True: the model keeps XLA after the fit, so evaluate compiles.
    tuner = XLATuner(verbose=0, analyze_hlo=False, keep=True)
    quiet_fit(
        model, tf.data.Dataset.from_tensor_slices((x, y)).batch(16), tuner=tuner
    )
    with profiled() as outside:
        model.evaluate(x[:20], y[:20], batch_size=8, verbose=0)
    with profiled() as second:
        quiet_fit(
            model,
            tf.data.Dataset.from_tensor_slices((x, y)).batch(16),
            tuner=tuner,
            validation_data=(x[:20], y[:20]),
            validation_batch_size=8,
        )
    report = tuner.report
    # evaluate compiled the test step for batches of 8 and 4; the second
    # fit's validation reuses both and its train step was compiled by the
    # first fit.
    assert len(outside) == 2 and len(second) == 0
    assert report.total_compilations == 0
    assert [c["function"] for c in report.outside_compilations] == [
        "test",
        "test",
    ]
    shapes = [c["shapes"]["x"][0] for c in report.outside_compilations]
    assert shapes == [8, 4]
    assert report.outside_compilations[0]["found"] == "before the fit"


def test_an_empty_dataset_trains_no_step_and_says_so():
    model, tuner = conv_model(), XLATuner(verbose=0, analyze_hlo=False)
    quiet_fit(model, generator_data(16, 4).take(0), tuner=tuner, epochs=1)
    report = tuner.report
    assert [e.steps for e in report.epochs] == [0]
    assert report.epochs[0].step_time_ms["median"] is None
    assert "no-steps" in report.finding_codes()


def test_an_unwritable_tensorboard_run_keeps_the_json(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "train").write_text("a file where the run folder goes")
    x, y = regression_data(32)
    tuner = XLATuner(log_dir=str(log_dir), verbose=0, analyze_hlo=False)
    history = quiet_fit(
        conv_model(),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(16),
        tuner=tuner,
        epochs=2,
    )
    assert len(history.history["loss"]) == 2
    import json

    data = json.loads((log_dir / "xla_report.json").read_text())
    assert [e["epoch"] for e in data["epochs"]] == [0, 1]
    failed = [f for f in tuner.report.findings if f.code == "output-failed"]
    assert failed and failed[0].message.startswith("TensorBoard summaries")
    assert "tuner-error" not in tuner.report.finding_codes()

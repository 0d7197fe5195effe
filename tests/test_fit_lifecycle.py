"""A fit's life from the model's side: the model is left as the user
compiled it (unless `keep=True`), and a fit that ends anywhere, by an
error or an interrupt in or between the hooks, leaves a true report
(each epoch once, with the steps it trained) and no profiler running."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import dense_model as shared_dense_model
from conftest import quiet_fit

from keras_xla import XLATuner
from keras_xla.core.report import XLAReport
from keras_xla.tf_backend.fit_adapter import TFFitAdapter

X = np.random.default_rng(0).random((10, 5), dtype=np.float32)
Y = np.random.default_rng(1).random((10, 1), dtype=np.float32)
BATCH = 2  # five steps an epoch


def dense_model(jit_compile=False):
    return shared_dense_model(5, jit_compile=jit_compile)


def fit(model, callbacks, epochs=2, **kwargs):
    return quiet_fit(
        model, X, Y, batch_size=BATCH, epochs=epochs, callbacks=callbacks,
        **kwargs,
    )  # fmt: skip


def tuner(**kwargs):
    kwargs.setdefault("verbose", 0)
    kwargs.setdefault("analyze_hlo", False)
    return XLATuner(**kwargs)


def epochs_of(report):
    return [(e.epoch, e.steps) for e in report.epochs]


# The model after the fit.


def test_model_is_left_as_compiled_and_plain_calls_compile_nothing(profiled):
    model = dense_model(jit_compile=False)
    first = tuner(jit_compile=True)
    fit(model, [first])
    assert first.report.jit.enabled and first.report.total_compilations == 1
    assert model.jit_compile is False
    assert first.report.jit.kept is False
    with profiled() as plain, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.evaluate(X, Y, batch_size=BATCH, verbose=0)
        model.predict(X, batch_size=BATCH, verbose=0)
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0)
    assert len(plain) == 0
    assert model.jit_compile is False
    # A second fit with the tuner's settings reuses the compiled step.
    second = tuner(jit_compile=True)
    with profiled() as again:
        fit(model, [second])
    assert second.report.jit.enabled
    assert second.report.total_compilations == len(again) == 0
    # The plain calls in between compiled nothing, and say so.
    assert second.report.outside_compilations == []
    assert model.jit_compile is False


def test_keep_leaves_the_tuners_setting(profiled):
    model = dense_model(jit_compile=False)
    kept = tuner(jit_compile=True, keep=True)
    fit(model, [kept])
    assert model.jit_compile is True and kept.report.jit.kept is True
    with profiled() as events, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0)
    assert len(events) == 0  # the tuner's compiled step, reused


def test_precision_policy_is_put_back():
    model = dense_model()
    mixed = tuner(jit_compile=False, mixed_precision="mixed_bfloat16")
    fit(model, [mixed], epochs=1)
    assert mixed.report.environment["policy"] == "mixed_bfloat16"
    assert model.dtype_policy.name == "float32"
    assert {layer.dtype_policy.name for layer in model.layers} == {"float32"}
    assert model.predict(X, verbose=0).dtype == np.float32
    kept = tuner(jit_compile=False, mixed_precision="mixed_bfloat16", keep=True)
    fit(model, [kept], epochs=1)
    assert model.dtype_policy.name == "mixed_bfloat16"


def test_a_raising_fit_leaves_the_model_as_compiled():
    model = dense_model(jit_compile=False)
    with pytest.raises(RuntimeError, match="stop"):
        fit(model, [tuner(jit_compile=True), Raise("on_epoch_end", 0)])
    assert model.jit_compile is False


def test_keep_is_checked():
    with pytest.raises(ValueError, match=r"XLATuner\(keep='yes'\)"):
        XLATuner(keep="yes")


# Interrupts and errors in or between the hooks.


class Raise(keras.callbacks.Callback):
    """Raises `error` in hook `hook` at epoch (or batch) `at` (None: a
    hook without one, `on_train_end`)."""

    def __init__(self, hook, at, error=None):
        super().__init__()
        self.at, self.error = at, error or RuntimeError("stop")
        setattr(self, hook, self._maybe_raise)

    def _maybe_raise(self, *args, **kwargs):
        if self.at is None or args[0] == self.at:
            raise self.error


def interrupted_fit(model, callbacks, error=RuntimeError, **kwargs):
    with pytest.raises(error):
        fit(model, callbacks, **kwargs)


def check_saved(log_dir, expected):
    saved = XLAReport.load(str(log_dir))
    assert epochs_of(saved) == expected
    assert "no-steps" not in saved.finding_codes()


def user_profiler_starts(tmp_path):
    tf.profiler.experimental.start(str(tmp_path / "mine"))
    tf.profiler.experimental.stop()


def test_error_in_a_callback_after_the_tuner_counts_the_epoch_once(tmp_path):
    model, first = dense_model(), tuner(log_dir=str(tmp_path))
    interrupted_fit(model, [first, Raise("on_epoch_end", 1)])
    assert epochs_of(first.report) == [(0, 5), (1, 5)]
    assert int(model.optimizer.iterations.numpy()) == 10
    assert "no-steps" not in first.report.finding_codes()
    check_saved(tmp_path, [(0, 5), (1, 5)])


def test_interrupt_inside_the_tuners_epoch_end(tmp_path, monkeypatch):
    calls = []

    def interrupt(self, stats, records):
        calls.append(stats.epoch)
        if stats.epoch == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(TFFitAdapter, "alignment", interrupt)
    model, first = dense_model(), tuner(log_dir=str(tmp_path))
    interrupted_fit(model, [first], KeyboardInterrupt)
    assert calls == [0, 1]
    assert epochs_of(first.report) == [(0, 5), (1, 5)]
    assert "no-steps" not in first.report.finding_codes()
    check_saved(tmp_path, [(0, 5), (1, 5)])


def test_interrupt_while_keras_reads_the_epochs_metrics(tmp_path):
    model = dense_model()
    read = model._get_metrics_result_or_logs
    seen = []

    def reading(logs):
        seen.append(1)
        if len(seen) == 2:  # the second epoch's metrics
            raise KeyboardInterrupt
        return read(logs)

    object.__setattr__(model, "_get_metrics_result_or_logs", reading)
    first = tuner(log_dir=str(tmp_path), profile_steps=(3, 8))
    interrupted_fit(model, [first], KeyboardInterrupt)
    assert epochs_of(first.report) == [(0, 5), (1, 5)]
    check_saved(tmp_path, [(0, 5), (1, 5)])
    # The profile window (steps 3 to 8) was open: it stopped, its trace
    # is in the report, and the user's own profiler starts.
    assert first.report.profile is not None
    assert first.report.profile.files
    user_profiler_starts(tmp_path)
    # The tuner's watch is gone from the model.
    assert model.__dict__["_get_metrics_result_or_logs"] is reading
    assert "reset_metrics" not in model.__dict__


def test_error_in_a_callback_before_the_tuners_train_end(tmp_path):
    model = dense_model(jit_compile=False)
    first = tuner(log_dir=str(tmp_path), profile_steps=(8, 20))
    interrupted_fit(model, [Raise("on_train_end", None), first])
    assert epochs_of(first.report) == [(0, 5), (1, 5)]
    check_saved(tmp_path, [(0, 5), (1, 5)])
    assert first.report.jit.kept is False and model.jit_compile is False
    user_profiler_starts(tmp_path)


def test_an_epoch_interrupted_before_its_first_step_is_not_listed(tmp_path):
    model, first = dense_model(), tuner(log_dir=str(tmp_path))
    interrupted_fit(
        model, [first, Raise("on_epoch_begin", 1, KeyboardInterrupt())],
        KeyboardInterrupt,
    )  # fmt: skip
    assert epochs_of(first.report) == [(0, 5)]
    assert "no-steps" not in first.report.finding_codes()
    check_saved(tmp_path, [(0, 5)])


def test_interrupt_mid_epoch_reports_the_steps_trained(tmp_path):
    model, first = dense_model(), tuner(log_dir=str(tmp_path))
    stop = Raise("on_train_batch_end", 2, KeyboardInterrupt())
    interrupted_fit(model, [first, stop], KeyboardInterrupt, epochs=1)
    assert int(model.optimizer.iterations.numpy()) == 3
    assert epochs_of(first.report) == [(0, 3)]
    check_saved(tmp_path, [(0, 3)])


def test_a_fit_no_hook_saw_end_is_closed_by_the_next(tmp_path):
    model = dense_model(jit_compile=False)
    first = tuner(log_dir=str(tmp_path), profile_steps=(0, 20))
    first.set_model(model)
    first.params = {"epochs": 2, "steps": 5}
    first.on_train_begin()
    first.on_epoch_begin(0)
    first.on_train_batch_begin(0)
    model.train_on_batch(X[:2], Y[:2])
    # Keras's loop stopped here; the next fit ends the stale one first.
    stale = first.report
    fit(model, [first], epochs=1)
    assert epochs_of(stale) == [(0, 1)] and stale.jit.kept is False
    assert epochs_of(first.report) == [(0, 5)]
    user_profiler_starts(tmp_path)
    assert model.jit_compile is False

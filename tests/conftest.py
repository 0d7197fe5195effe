"""Shared test setup: quiet TensorFlow, tiny models, profiler ground truth."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import contextlib  # noqa: E402
import socket  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def no_tfdata_autotune():
    """Keras's tf.data pipelines run without tf.data's autotuning here.

    Freeing an iterator with autotuning on can wait for the autotune
    thread's next wake-up, whose period doubles up to 60 s
    (`benchmarks/tfdata_teardown.py`): an iterator that the garbage
    collector frees during a later test stalls that test for up to a
    minute, at random. No test is about that wait."""
    import tensorflow as tf
    from keras.src.trainers import data_adapters

    options = tf.data.Options()
    options.autotune.enabled = False
    patched = []
    for name in dir(data_adapters):
        cls = getattr(data_adapters, name)
        get = getattr(cls, "get_tf_dataset", None)
        if not isinstance(cls, type) or get is None:
            continue

        def without_autotune(self, _get=get):
            dataset = _get(self)
            if isinstance(dataset, tf.data.Dataset):
                dataset = dataset.with_options(options)
            return dataset

        patched.append((cls, cls.__dict__.get("get_tf_dataset")))
        cls.get_tf_dataset = without_autotune
    yield
    for cls, original in patched:
        if original is None:
            del cls.get_tf_dataset
        else:
            cls.get_tf_dataset = original


@pytest.fixture
def profiled(tmp_path):
    """Context manager: profile a block; yields a list that receives the
    XLA compile events the TF profiler saw in it."""
    import tensorflow as tf

    from keras_xla.tf_backend.profiler import read_compile_events

    counter = {"n": 0}

    @contextlib.contextmanager
    def run():
        counter["n"] += 1
        log_dir = str(tmp_path / f"profile{counter['n']}")
        events = []
        tf.profiler.experimental.start(log_dir)
        try:
            yield events
        finally:
            tf.profiler.experimental.stop()
            events.extend(read_compile_events(log_dir))

    return run


@pytest.fixture
def epoch_records(monkeypatch):
    """A list that receives, per finished epoch, the train records the
    accountant built the epoch's figures from."""
    from keras_xla.core import accounting

    taken = []
    finish = accounting.Accountant.finish_epoch

    def keep_records(self, records):
        taken.append(list(records))
        return finish(self, records)

    monkeypatch.setattr(accounting.Accountant, "finish_epoch", keep_records)
    return taken


def conv_model(steps_per_execution=1, jit_compile="auto"):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 4)),
            keras.layers.Conv1D(8, 3),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(
        "adam",
        "mse",
        steps_per_execution=steps_per_execution,
        jit_compile=jit_compile,
    )
    return model


def dense_model(features=4, hidden=(), outputs=1, seed=0, **compile_kwargs):
    """A small Dense regression model on `features` inputs (`hidden`:
    the widths of Dense layers before the output's), compiled with SGD
    and MSE (`compile_kwargs` for Keras's compile)."""
    import keras

    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Dense(width) for width in hidden]
    model = keras.Sequential(
        [keras.Input((features,)), *layers, keras.layers.Dense(outputs)]
    )
    model.compile("sgd", "mse", **compile_kwargs)
    return model


def quiet_fit(model, *args, tuner=None, callbacks=(), **kwargs):
    """`model.fit(*args, **kwargs)` with the tuner (and `callbacks`),
    silent: `verbose=0` unless given, warnings not shown."""
    import warnings

    kwargs.setdefault("verbose", 0)
    callbacks = [*callbacks, *([tuner] if tuner is not None else [])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(*args, callbacks=callbacks, **kwargs)


def regression_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 16, 4), dtype=np.float32)
    y = rng.random((n, 1), dtype=np.float32)
    return x, y


def many_dynamic_inputs(lengths=(3, 5, 3)):
    """A model of 16 inputs of shape [None, None] (33 dynamic dimensions
    with y's batch: more than the probe's 30) compiled with XLA, and a
    dataset whose last input's length takes `lengths` in turn."""
    import keras
    import tensorflow as tf

    names = [f"in{i:02d}" for i in range(16)]
    inputs = [keras.Input((None,), name=n) for n in names]
    summed = [keras.ops.sum(t, axis=1, keepdims=True) for t in inputs]
    joined = keras.ops.concatenate(summed, axis=-1)
    model = keras.Model(inputs, keras.layers.Dense(1)(joined))
    model.compile("sgd", "mse", jit_compile=True)

    def batches():
        for last in lengths:
            x = {n: np.ones((4, 3), "float32") for n in names}
            x[names[-1]] = np.ones((4, last), "float32")
            yield x, np.zeros((4, 1), "float32")

    spec = tf.TensorSpec((None, None), tf.float32)
    data = tf.data.Dataset.from_generator(
        batches,
        output_signature=(
            {n: spec for n in names},
            tf.TensorSpec((None, 1), tf.float32),
        ),
    )
    return model, data


def pytest_configure(config):
    # What keras_xla keeps per machine (the measured peak FLOP/s) goes to
    # a folder of this test session, not the user's cache.
    import tempfile

    os.environ.setdefault(
        "KERAS_XLA_CACHE_DIR", tempfile.mkdtemp(prefix="keras_xla_tests_")
    )


def no_payback_rule():
    """Turns off the trial's rule that an XLA candidate is not compiled
    when the run's steps left cannot pay back its compile: these tests'
    runs are far too short for XLA to pay back, and they test what a
    trial with XLA does, not that rule (its own tests are in
    test_trial.py). For a test's own process."""
    import dataclasses

    from keras_xla.auto import policy

    policy.TUNABLES = dataclasses.replace(policy.TUNABLES, payback=False)


@pytest.fixture
def xla_tried(monkeypatch):
    """`no_payback_rule` for one test."""
    import dataclasses

    from keras_xla.auto import policy

    tried = dataclasses.replace(policy.TUNABLES, payback=False)
    monkeypatch.setattr(policy, "TUNABLES", tried)


def _token_and_position_class():
    import keras

    class TokenAndPosition(keras.layers.Layer):
        """Token and position embeddings, as keras-io's NER example."""

        def __init__(self, vocab, max_length, width):
            super().__init__()
            self.tokens = keras.layers.Embedding(vocab, width)
            self.positions = keras.layers.Embedding(max_length, width)

        def call(self, ids):
            length = keras.ops.shape(ids)[-1]
            return self.tokens(ids) + self.positions(keras.ops.arange(length))

    return TokenAndPosition


def _TokenAndPosition(*args):
    return _token_and_position_class()(*args)


def ner_like(batches=(7, 9, 12, 7, 9, 12), batch=4, last=3, vocab=50):
    """A small NER-like tagger (Embedding, MultiHeadAttention, Dense, a
    custom masked loss) compiled with XLA, and a `padded_batch` dataset
    of unknown cardinality: each batch pads its token ids to the
    lengths in `batches` (full batches of `batch`), then a last batch of
    `last` sequences padded to one more than the longest length (a
    partial batch of a new length)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = _TokenAndPosition(vocab, 64, 16)(tokens)
    attended = keras.layers.MultiHeadAttention(2, 8)(x, x)
    x = keras.layers.LayerNormalization()(
        x + keras.layers.Dropout(0.1)(attended)
    )
    hidden = keras.layers.Dense(32, activation="relu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(16)(hidden))
    model = keras.Model(tokens, keras.layers.Dense(5)(x))

    def masked_loss(y_true, y_pred):
        mask = keras.ops.cast(y_true > 0, "float32")
        loss = keras.losses.sparse_categorical_crossentropy(
            y_true, y_pred, from_logits=True
        )
        return keras.ops.sum(loss * mask) / keras.ops.maximum(
            keras.ops.sum(mask), 1.0
        )

    model.compile("adam", masked_loss, jit_compile=True)
    lengths = [n for n in batches for _ in range(batch)]
    lengths += [max(batches) + 1] * last
    rng = np.random.default_rng(0)

    def sentences():
        for n in lengths:
            ids = rng.integers(1, vocab, size=n).astype("int32")
            yield ids, (ids % 4 + 1).astype("int32")

    spec = tf.TensorSpec((None,), tf.int32)
    data = tf.data.Dataset.from_generator(
        sentences, output_signature=(spec, spec)
    ).padded_batch(batch)
    return model, data


def free_ports(n):
    """`n` ports on 127.0.0.1 that were free a moment ago (the workers of
    a multi-process test bind them)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports

import numpy as np
import tensorflow as tf

from keras_xla.core.batch_paths import flatten_with_paths
from keras_xla.tf_backend.probe import ShapeProbe


def test_paths_follow_keras_batch_structure():
    x = {"tokens": tf.zeros([2, 3]), "mask": tf.zeros([2, 3])}
    pairs = flatten_with_paths((x, tf.zeros([2]), None))
    assert [p for p, _ in pairs] == ["x/mask", "x/tokens", "y"]
    assert [p for p, _ in flatten_with_paths(tf.zeros([1]))] == ["x"]
    nested = flatten_with_paths(([tf.zeros([1]), tf.zeros([2])],))
    assert [p for p, _ in nested] == ["x/0", "x/1"]


def test_probe_records_concrete_shapes_inside_xla():
    probe = ShapeProbe("train", slots=1)

    @tf.function(jit_compile=True, reduce_retracing=True)
    def step(x, y):
        probe.record((x, y))
        return tf.reduce_sum(x) + tf.cast(tf.reduce_sum(y), tf.float32)

    spec = [tf.TensorSpec([None, 3]), tf.TensorSpec([None], tf.int32)]
    fn = step.get_concrete_function(*spec)
    for n in (4, 4, 2):
        fn(tf.zeros([n, 3]), tf.zeros([n], tf.int32))
        steps = probe.read_new()
        assert len(steps) == 1 and len(steps[0]) == 1  # one step, replica
        assert [(t.path, t.shape, t.dtype) for t in steps[0][0].tensors] == [
            ("x", (n, 3), "float32"),
            ("y", (n,), "int32"),
        ]
    assert probe.read_new() == []
    assert probe.steps_recorded == 3


def test_probe_keeps_every_step_of_a_multi_step_call():
    probe = ShapeProbe("train", slots=4)
    data = tf.data.Dataset.range(10).map(lambda i: tf.zeros([i % 3 + 1]))

    @tf.function(jit_compile=True)
    def one(x):
        probe.record(x)
        return tf.reduce_sum(x)

    @tf.function
    def several(iterator):
        for _ in tf.range(4):
            one(next(iterator))

    it = iter(data)
    several(it)
    sizes = [s.tensors[0].shape[0] for (s,) in probe.read_new()]
    assert sizes == [1, 2, 3, 1]
    several(it)
    sizes = [s.tensors[0].shape[0] for (s,) in probe.read_new()]
    assert sizes == [2, 3, 1, 2]
    assert np.all(probe._rows.numpy()[:, 0] > 0)


def test_many_dynamic_dimensions_are_counted_exactly(profiled):
    # 16 inputs of shape [None, None] (32 dynamic dims, the probe row
    # holds 30): a recompilation caused by the last input alone is still
    # a new signature, and the report says what it folded.
    import warnings

    from conftest import many_dynamic_inputs

    from keras_xla import XLATuner

    model, data = many_dynamic_inputs()
    tuner = XLATuner(verbose=0, analyze_hlo=False, baseline=False)
    with profiled() as events, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(data, epochs=1, verbose=0, callbacks=[tuner])
    report = tuner.report
    assert report.total_compilations == len(events) == 2
    (rec,) = report.recompilations
    assert rec.input == "(folded dimensions)"
    (finding,) = [f for f in report.findings if f.code == "folded-dimensions"]
    assert "`x/in15` dim 1" in finding.message
    # 33 dynamic dims (16 inputs x 2, y's batch): 29 kept, 4 folded.
    assert "folds the other 4" in finding.message

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_xla.data import (
    bucket_by_length,
    choose_buckets,
    fixed_slice,
    pad_batches,
)


def test_fixed_slice_static_shape_and_offsets():
    image = tf.reshape(tf.range(5 * 7 * 2), [5, 7, 2])
    out = fixed_slice(image, 3, offset="center")
    assert out.shape == (3, 3, 2)
    np.testing.assert_array_equal(out, image[1:4, 2:5])
    np.testing.assert_array_equal(
        fixed_slice(image, (2, 4), offset=(3, 1)), image[3:5, 1:5]
    )
    # Offsets are clamped to the valid range.
    np.testing.assert_array_equal(
        fixed_slice(image, 2, offset=(9, 9)), image[3:5, 5:7]
    )


def test_fixed_slice_random_offset_is_a_real_window():
    image = tf.reshape(tf.range(6 * 6), [6, 6, 1])
    seen = set()
    for _ in range(30):
        out = fixed_slice(image, 4).numpy()
        top, left = divmod(int(out[0, 0, 0]), 6)
        np.testing.assert_array_equal(
            out, image[top : top + 4, left : left + 4]
        )
        seen.add((top, left))
    assert len(seen) > 1


def test_fixed_slice_pads_small_images_and_is_static_in_datasets():
    out = fixed_slice(tf.ones([2, 3, 3]), 4, offset="center")
    assert out.shape == (4, 4, 3)
    assert float(tf.reduce_sum(out)) == 2 * 3 * 3
    sizes = tf.data.Dataset.from_tensor_slices([[5, 9], [8, 6], [7, 7]])
    ds = sizes.map(lambda s: tf.zeros([s[0], s[1], 3])).map(
        lambda im: fixed_slice(im, 4)
    )
    assert ds.element_spec.shape == (4, 4, 3)
    assert ds.batch(3).element_spec.shape.as_list() == [None, 4, 4, 3]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"offset": "left"}, r"fixed_slice\(offset='left'\)"),
        ({"size": (1, 2, 3)}, r"fixed_slice\(size=\(1, 2, 3\)\)"),
        ({"size": 0}, r"fixed_slice\(size=0\)`: pass a positive int"),
        ({"size": -1}, r"fixed_slice\(size=-1\)"),
        ({"size": 4.0}, r"fixed_slice\(size=4.0\)"),
        ({"size": True}, r"fixed_slice\(size=True\)"),
        (
            {"offset": (-1, 0)},
            r"offset=\(-1, 0\)\)`: pass a non-negative.*\(top, left\)",
        ),
        ({"offset": (0.5, 0)}, r"offset=\(0.5, 0\)"),
    ],
)
def test_fixed_slice_bad_arguments(kwargs, match):
    kwargs.setdefault("size", 2)
    with pytest.raises(ValueError, match=match):
        fixed_slice(tf.zeros([4, 4, 1]), **kwargs)


def test_fixed_slice_numpy_ints_and_unknown_rank():
    out = fixed_slice(tf.ones([5, 6, 3]), np.int64(4), offset=(np.int32(1), 0))
    assert out.shape == (4, 4, 3)
    assert float(tf.reduce_sum(out)) == 4 * 4 * 3

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def unknown_rank(image):
        return fixed_slice(image, 2)

    with pytest.raises(ValueError, match="unknown rank.*set_shape"):
        unknown_rank.get_concrete_function()


def elements(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 3), dtype=np.float32)
    y = rng.random((n, 1), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)), x, y


def test_pad_batches_shapes_and_weights():
    ds, _, _ = elements(10)
    batches = list(pad_batches(ds, 4))
    assert [b[0].shape.as_list() for b in batches] == [[4, 3]] * 3
    np.testing.assert_allclose(batches[0][2], [1, 1, 1, 1])
    np.testing.assert_allclose(batches[2][2], [2, 2, 0, 0])
    np.testing.assert_array_equal(batches[2][0][2:], 0)
    spec = pad_batches(ds, 4).element_spec
    assert spec[0].shape.as_list() == [4, 3]
    repeat = list(pad_batches(ds, 4, pad_with="repeat"))[2]
    np.testing.assert_array_equal(repeat[0][2:], repeat[0][:2])


def test_pad_batches_keeps_loss_and_gradients_exact():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)]
    )
    loss_fn = keras.losses.MeanSquaredError()
    _, x, y = elements(6)
    ds = tf.data.Dataset.from_tensor_slices((x, y, np.arange(6.0) + 1))
    px, py, pw = list(pad_batches(ds, 4))[1]  # 2 real samples, 2 pads

    def loss_and_grads(x, y, w):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x), sample_weight=w)
        return loss, tape.gradient(loss, model.trainable_weights)

    real_loss, real_grads = loss_and_grads(x[4:], y[4:], np.array([5.0, 6.0]))
    pad_loss, pad_grads = loss_and_grads(px, py, pw)
    np.testing.assert_allclose(pad_loss, real_loss, rtol=1e-6)
    for a, b in zip(pad_grads, real_grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_pad_batches_bad_arguments():
    ds, _, _ = elements(3)
    with pytest.raises(ValueError, match=r"pad_batches\(batch_size=0\)"):
        pad_batches(ds, 0)
    with pytest.raises(ValueError, match=r"pad_with='edge'"):
        pad_batches(ds, 2, pad_with="edge")
    with pytest.raises(ValueError, match="unbatched"):
        pad_batches(ds.map(lambda x, y: x), 2)
    # Batched already (also behind a map): batches of batches otherwise.
    batched = ds.batch(2).map(lambda x, y: (x * 2, y))
    with pytest.raises(ValueError, match=r"batched already.*\.unbatch\(\)"):
        pad_batches(batched, 2)
    assert pad_batches(ds.batch(2).unbatch(), 2).element_spec[0].shape[0] == 2
    # numpy integers are ints.
    assert pad_batches(ds, np.int64(2)).element_spec[0].shape[0] == 2
    with pytest.raises(ValueError, match=r"batch_size=2.0"):
        pad_batches(ds, 2.0)


def sequences(lengths, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 50, size=n) for n in lengths]
    return tf.data.Dataset.from_generator(
        lambda: ((s, np.float32(len(s) % 2)) for s in seqs),
        output_signature=(
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([], tf.float32),
        ),
    )


def test_bucket_by_length_pads_to_boundaries():
    lengths = [3, 9, 4, 17, 8, 2, 12, 5, 1]
    batches = list(bucket_by_length(sequences(lengths), [4, 8, 16, 32], 2))
    shapes = sorted(tuple(b[0].shape.as_list()) for b in batches)
    assert set(shapes) == {(2, 4), (2, 8), (2, 16), (2, 32)}
    assert sum(
        float(tf.reduce_sum(tf.cast(b[2] > 0, tf.float32))) for b in batches
    ) == len(lengths)
    total_tokens = sum(int(tf.math.count_nonzero(b[0])) for b in batches)
    assert total_tokens == sum(lengths)


def test_bucket_by_length_rejects_bad_boundaries():
    with pytest.raises(ValueError, match="strictly increasing"):
        bucket_by_length(sequences([1]), [8, 4], 2)
    for bad in (8, 8.0, {"a": 8}, "8", [4, 8.5], None):
        with pytest.raises(ValueError, match=r"boundaries=.*e\.g\. \[16"):
            bucket_by_length(sequences([1]), bad, 2)
    with pytest.raises(ValueError, match=r"pad_value='x'"):
        bucket_by_length(sequences([1]), [4], 2, pad_value="x")
    with pytest.raises(ValueError, match="batched already"):
        bucket_by_length(sequences([1]).batch(1), [4], 2)


def test_bucket_filler_rows_hold_pad_value():
    # Three sequences in one bucket of batch 2: the second batch has one
    # real row and one filler row, all pad_value, with weight 0.
    batches = list(bucket_by_length(sequences([3, 2, 4]), [4], 2, -1))
    last = batches[-1]
    weights = last[2].numpy().tolist()
    assert weights == [2.0, 0.0]
    assert last[0].numpy()[1].tolist() == [-1, -1, -1, -1]
    assert (last[0].numpy()[0] == -1).sum() == 0  # the length-4 sequence
    first = batches[0][0].numpy()
    assert sorted((row == -1).sum() for row in first) == [1, 2]
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than"):
        list(bucket_by_length(sequences([9]), [4, 8], 2))


def test_bucketing_bounds_compilations(profiled):
    from test_tuner import text_model

    from keras_xla import XLATuner

    # 10 distinct padded lengths without buckets; 3 buckets with them.
    lengths = [3, 5, 2, 4, 9, 1, 2, 3, 5, 5, 4, 1, 12, 3, 2, 2, 14, 6, 7, 11]
    ds = bucket_by_length(sequences(lengths), [4, 8, 16], batch_size=4)
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with profiled() as events:
        text_model().fit(ds, epochs=2, verbose=0, callbacks=[tuner])
    assert tuner.report.total_compilations == len(events) == 3


def test_chosen_buckets_feed_bucket_by_length():
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(3, 40, 200)]
    # A compilation costs as much as ~100 steps: over one epoch padding
    # everything to the longest pays; over 30, a few buckets do.
    one = choose_buckets(lengths, 3.0, 30.0, batch_size=8)
    assert one.edges == (max(lengths),)
    choice = choose_buckets(lengths, 3.0, 30.0, batch_size=8, epochs=30)
    assert 1 < choice.compilations <= 4
    assert choice.edges[-1] == max(lengths)
    assert choice.saved_seconds > 0
    assert 0 < choice.padding_share < 0.5
    # Cheap compiles: every length its own bucket, no padding.
    every = choose_buckets(lengths, 0.0001, 30.0, 8)
    assert every.edges == tuple(sorted(set(lengths)))
    # The edges are the boundaries: every batch is one of them.
    data = tf.data.Dataset.from_generator(
        lambda: ((np.ones(n, "int32"), np.float32(0)) for n in lengths),
        output_signature=(
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.float32),
        ),
    )
    widths = {
        int(x.shape[1]) for x, *_ in bucket_by_length(data, choice.edges, 8)
    }
    assert widths <= set(choice.edges)
    with pytest.raises(ValueError, match="choose_buckets\\(batch_size=0\\)"):
        choose_buckets(lengths, 1.0, 1.0, 0)

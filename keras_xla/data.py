"""tf.data helpers that keep shapes static, so XLA compiles once.

XLA compiles a step once per concrete input shape. Shapes drift in input
pipelines for three common reasons, each with a helper here:

- crops whose *size* varies (scale augmentation without a resize, images
  fed at their decoded size): `fixed_slice` cuts a constant-size window.
  (`tf.image.random_crop` with a constant `size` is already static.)
- a partial last batch: `pad_batches` pads it to the full batch size and
  adds sample weights that keep the loss equal to the unpadded batch's.
- per-batch padding of sequences: `bucket_by_length` pads to a small fixed
  set of lengths, so a text model compiles once per bucket; which lengths
  cost the fewest seconds is `choose_buckets`' answer, from the lengths
  and the measured compile and step times.
"""

from __future__ import annotations

import collections
import numbers
import statistics
from collections.abc import Iterable, Sequence

from keras_xla.core.buckets import BucketChoice, choose_edges

try:
    import tensorflow as tf
except ImportError as error:  # e.g. installed for Keras's JAX backend only
    raise ImportError(
        "keras_xla.data builds tf.data pipelines and needs TensorFlow: "
        "`pip install tensorflow` (Keras on JAX trains on tf.data datasets "
        "too), or pad and bucket your batches in your own pipeline."
    ) from error


def fixed_slice(
    image: tf.Tensor,
    size: int | Sequence[int],
    offset: str | Sequence[int] = "random",
    seed: int | None = None,
) -> tf.Tensor:
    """Crops a fixed-size window from an `(height, width, channels)` image.

    The output shape is static (`size` by `size`, the image's channels), so
    a batch of these compiles once under XLA whatever size the images were
    decoded at. An image smaller than `size` is zero-padded at the bottom
    and right first.

    Args:
        image: A 3-D image tensor of any height and width.
        size: Output `(height, width)`, or one int for a square.
        offset: `"random"` (uniform over valid positions), `"center"`, or
            an explicit `(top, left)`. Defaults to `"random"`.
        seed: Op seed for the random offset. Defaults to `None`.

    Returns:
        The cropped image, shape `(height, width, channels)`.
    """
    height, width = _pair(size, "size", minimum=1)
    image = tf.convert_to_tensor(image)
    if image.shape.rank is None:
        raise ValueError(
            "fixed_slice() expects a 3-D (height, width, channels) image; "
            "got one of unknown rank (as `tf.io.decode_image` returns). Give "
            "it a rank first: `image.set_shape([None, None, 3])`, or decode "
            "with `expand_animations=False`."
        )
    if image.shape.rank != 3:
        raise ValueError(
            "fixed_slice() expects a 3-D (height, width, channels) image; "
            f"got shape {image.shape}. Map it over unbatched images."
        )
    shape = tf.shape(image)
    pad_h = tf.maximum(height - shape[0], 0)
    pad_w = tf.maximum(width - shape[1], 0)
    image = tf.pad(image, [[0, pad_h], [0, pad_w], [0, 0]])
    shape = tf.shape(image)
    room_h, room_w = shape[0] - height, shape[1] - width
    if isinstance(offset, str):
        if offset not in ("random", "center"):
            raise ValueError(
                f"Unsupported value `fixed_slice(offset={offset!r})`. "
                "Possible choices are: 'random', 'center', or (top, left)."
            )
        if offset == "center":
            top, left = room_h // 2, room_w // 2
        else:
            top = tf.random.uniform([], 0, room_h + 1, tf.int32, seed=seed)
            left = tf.random.uniform([], 0, room_w + 1, tf.int32, seed=seed)
    else:
        top, left = _pair(offset, "offset", minimum=0)
        top, left = tf.minimum(top, room_h), tf.minimum(left, room_w)
    out = tf.slice(image, [top, left, 0], [height, width, -1])
    out.set_shape([height, width, image.shape[-1]])
    return out


def pad_batches(
    dataset: tf.data.Dataset, batch_size: int, pad_with: str = "zeros"
) -> tf.data.Dataset:
    """Batches to exactly `batch_size`, padding the last batch.

    Every batch becomes `(x, y, sample_weight)` with a static batch
    dimension, so XLA compiles one shape instead of two. In a batch with
    `n` real samples, the real samples get weight `batch_size / n` (times
    any weight the element already had) and the pads weight 0. With
    Keras's default `sum_over_batch_size` loss reduction (sum of weighted
    losses divided by the batch size) the loss, and so the gradients, then
    equal those of the unpadded batch.

    What it cannot make exact: layers that compute batch statistics
    (BatchNormalization in training) see the pads; `pad_with="repeat"`
    fills the batch with repeats of its real samples, which keeps those
    statistics closer. Keras's running `loss` shown in the progress bar
    weights each batch by its size, so the padded batch counts as full
    there. Metrics passed as `weighted_metrics` ignore the pads exactly;
    plain `metrics` do not use sample weights.

    Args:
        dataset: Unbatched elements `(x, y)` or `(x, y, sample_weight)`;
            `x` and `y` may be nested.
        batch_size: The batch size every batch will have.
        pad_with: `"zeros"` or `"repeat"`. Defaults to `"zeros"`.

    Returns:
        A dataset of `(x, y, sample_weight)` batches of `batch_size`.
    """
    _check_batch_size(batch_size, "pad_batches")
    if pad_with not in ("zeros", "repeat"):
        raise ValueError(
            f"Unsupported value `pad_batches(pad_with={pad_with!r})`. "
            "Possible choices are: 'zeros', 'repeat'."
        )
    _check_elements(dataset, "pad_batches")
    return dataset.batch(batch_size).map(
        lambda *batch: _pad_batch(batch, batch_size, pad_with),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def bucket_by_length(
    dataset: tf.data.Dataset,
    boundaries: Sequence[int],
    batch_size: int,
    pad_value: int | float = 0,
) -> tf.data.Dataset:
    """Pads sequences to a small fixed set of lengths and batches per bucket.

    Each sequence `x` (1-D) is padded to the smallest boundary that holds
    it, and batched with sequences of the same bucket; each bucket's last
    batch is padded to `batch_size` as in `pad_batches`. A model then sees
    at most `len(boundaries)` distinct shapes, so XLA compiles once per
    bucket instead of once per padded length.

    Args:
        dataset: Unbatched `(x, y)` or `(x, y, sample_weight)` elements with
            a 1-D `x`.
        boundaries: Increasing bucket lengths; the last one must hold the
            longest sequence (a longer one raises at run time).
        batch_size: Batch size of every batch.
        pad_value: Value `x` is padded with. Defaults to `0`.

    Returns:
        A dataset of `(x, y, sample_weight)` batches, `x` of shape
        `(batch_size, boundary)`.
    """
    _check_batch_size(batch_size, "bucket_by_length")
    bounds = _int_list(boundaries)
    if not bounds or bounds != sorted(set(bounds)) or bounds[0] <= 0:
        raise ValueError(
            f"Unsupported value `bucket_by_length(boundaries={boundaries!r})`"
            ": pass strictly increasing positive lengths, e.g. [16, 32, 64]."
        )
    if isinstance(pad_value, bool) or not isinstance(pad_value, numbers.Number):
        raise ValueError(
            f"Unsupported value `bucket_by_length(pad_value={pad_value!r})`: "
            "pass a number (the value sequences are padded with)."
        )
    spec = _check_elements(dataset, "bucket_by_length")
    if spec[0].shape.rank != 1:
        raise ValueError(
            "bucket_by_length() expects 1-D sequences as `x`; got element "
            f"spec {spec[0]}."
        )
    bounds_t = tf.constant(bounds, tf.int32)

    def assign(x, *rest):
        length = tf.shape(x)[0]
        bucket = tf.searchsorted(bounds_t, tf.reshape(length, [1]))[0]
        tf.debugging.assert_less(
            bucket,
            len(bounds),
            message=f"a sequence is longer than the last boundary {bounds[-1]}",
        )
        target = tf.gather(bounds_t, tf.minimum(bucket, len(bounds) - 1))
        # Never a negative padding: the pad could otherwise run before the
        # assertion and fail first, with TensorFlow's message, not ours.
        extra = tf.maximum(target - length, 0)
        x = tf.pad(x, [[0, extra]], constant_values=pad_value)
        return (tf.cast(bucket, tf.int64), x, *rest)

    grouped = dataset.map(assign).group_by_window(
        key_func=lambda key, *_: key,
        reduce_func=lambda key, window: window.batch(batch_size),
        window_size=batch_size,
    )
    return grouped.map(
        lambda key, *batch: _pad_batch(batch, batch_size, "zeros", pad_value)
    )


def _pad_batch(batch, batch_size, pad_with, x_pad_value=0):
    x, y, *weights = batch
    n = tf.shape(tf.nest.flatten(x)[0])[0]
    missing = batch_size - n
    real = tf.fill(
        [n], tf.cast(batch_size, tf.float32) / tf.cast(n, tf.float32)
    )
    if weights:  # the element's own sample weights
        real = real * tf.cast(weights[0], tf.float32)
    weights = tf.concat([real, tf.zeros([missing], tf.float32)], axis=0)
    weights.set_shape([batch_size])

    def pad(t, value=0):
        if pad_with == "repeat":
            out = tf.gather(t, tf.math.floormod(tf.range(batch_size), n))
        else:
            paddings = [[0, missing]] + [[0, 0]] * (t.shape.rank - 1)
            out = tf.pad(t, paddings, constant_values=value)
        out.set_shape([batch_size] + t.shape.as_list()[1:])
        return out

    x = tf.nest.map_structure(lambda t: pad(t, x_pad_value), x)
    return x, tf.nest.map_structure(pad, y), weights


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _pair(value, name, minimum):
    """`value` as an (int, int) pair, each at least `minimum`."""
    kind, example, what = (
        ("a positive int", "(224, 224)", "(height, width)")
        if minimum
        else ("a non-negative int", "(0, 0)", "(top, left)")
    )
    pair = (value, value) if _is_int(value) else value
    try:
        pair = tuple(pair)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(_is_int(v) and v >= minimum for v in pair):
        raise ValueError(
            f"Unsupported value `fixed_slice({name}={value!r})`: pass {kind}"
            f" or a {what} pair of them, e.g. {name}={example}."
        )
    return int(pair[0]), int(pair[1])


def _int_list(boundaries) -> list[int]:
    """The boundaries as ints; [] if they are not a sequence of ints."""
    if isinstance(boundaries, (str, bytes, dict)) or _is_int(boundaries):
        return []
    try:
        values = list(boundaries)
    except TypeError:
        return []
    return [int(v) for v in values] if all(map(_is_int, values)) else []


def _check_batch_size(batch_size, fn):
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(
            f"Unsupported value `{fn}(batch_size={batch_size!r})`: pass a "
            "positive int."
        )


def _check_elements(dataset, fn):
    """`dataset`'s element spec, checked: 2 or 3 items, and unbatched
    (batching a batched dataset again gives batches of batches)."""
    spec = dataset.element_spec
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise ValueError(
            f"{fn}() expects unbatched (x, y) or (x, y, sample_weight) "
            f"elements; got element spec {spec}."
        )
    for _ in range(100):
        name = type(dataset).__name__
        if "Unbatch" in name:
            break
        if "Batch" in name:
            raise ValueError(
                f"{fn}() expects an unbatched dataset, and this one is "
                f"batched already ({name}). Pass the dataset before "
                f"`.batch()`, or call `.unbatch()` first: {fn}() makes the "
                "batches itself."
            )
        dataset = getattr(dataset, "_input_dataset", None)
        if dataset is None:
            break
    return spec


def choose_buckets(
    lengths: Iterable[int],
    compile_seconds: float,
    step_ms: float,
    batch_size: int,
    epochs: int = 1,
    max_buckets: int | None = None,
) -> BucketChoice:
    """The `bucket_by_length` boundaries that cost the fewest seconds.

    Each boundary compiles the step once; each sequence padded from `n` to
    `b` costs `b - n` elements of work, at the step's time per element
    (`step_ms` over `batch_size` sequences of the median length). The
    answer minimizes their sum over `epochs` passes over `lengths`
    (`core.buckets`): a longer run pays for more buckets. A report
    gives both times (`report.compile_log`, `step_time_ms["median"]`).

    Example:

    ```python
    choice = keras_xla.data.choose_buckets(
        [len(t) for t in token_lists], compile_seconds=4.0, step_ms=30.0,
        batch_size=32, epochs=10,
    )
    ds = keras_xla.data.bucket_by_length(ds, choice.edges, 32)
    ```

    Args:
        lengths: Every sequence's length (the pipeline's, or a sample).
        compile_seconds: One compilation of the train step (seconds).
        step_ms: A train step's time (ms) at the median length.
        batch_size: Sequences per batch.
        epochs: Passes over `lengths` the fit makes. Defaults to `1`.
        max_buckets: At most this many boundaries. Defaults to `None`:
            as many as pay.

    Returns:
        A `core.buckets.BucketChoice`: `edges` (the boundaries), the
        compilations, the padding's share, and the seconds against one
        compilation per length.
    """
    _check_batch_size(batch_size, "choose_buckets")
    if not _is_int(epochs) or epochs < 1:
        raise ValueError(
            f"Unsupported value `choose_buckets(epochs={epochs!r})`: pass "
            "the fit's epochs, a positive int."
        )
    counts = collections.Counter(int(n) for n in lengths)
    median = statistics.median(counts.elements()) if counts else 1
    unit_ms = step_ms / (batch_size * max(median, 1))
    steps = {n: count * epochs for n, count in counts.items()}
    return choose_edges(steps, compile_seconds, unit_ms, max_buckets)

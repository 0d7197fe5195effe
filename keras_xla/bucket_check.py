"""Whether padding a drifting input to buckets leaves a fit's results as
they were (`XLATuner(on_recompile_storm="bucket")`).

Padding `x`'s drifting dimension changes nothing only where the model
hides the padding: a layer makes a mask of the padding value
(`Embedding(mask_zero=True)`: 0, `Masking`: its `mask_value`) and every
other layer carries the mask (Keras's `supports_masking`: attention,
recurrent and pooling layers use it; a `Flatten`, a convolution or a
custom layer without it would read the padding). A label per position
(`y` with the same dimension) is padded and weighted by
`core.shape_switch.BucketSwitch`, whose weights follow Keras's
division of the loss (by the mask's count where the prediction carries
the mask, else by every position); that keeps the loss only for Keras's
default reduction, and the metrics only where they are weighted (Keras's
`compile(metrics=...)` counts every position, weighted or not). A
batch with its own `sample_weight` is left as it is. Anything else is
refused with the reason: guessing would train on other data.

Keras only (any backend): reads the model's layers and compile config.
"""

from __future__ import annotations

from typing import Any

FIX = (
    "Mask the padding (`Embedding(mask_zero=True)`, or a `Masking` layer, "
    "with layers that support masking), or keep on_recompile_storm="
    "'per_shape'; or bucket the pipeline yourself "
    "(`keras_xla.data.bucket_by_length`)."
)


def plan(model: Any, signature: Any, storm: Any) -> tuple[dict | None, str]:
    """`BucketSwitch`'s `dim`, `pad_value` and `labels` for `model`,
    whose last train batch had `signature`, in `storm`; or None and why
    padding could change the result."""
    dims = storm.dims or ([] if storm.dim is None else [storm.dim])
    if storm.input != "x" or len(dims) != 1 or dims[0] == 0:
        return None, (
            "bucket pads one dimension of the single input `x`; the storm "
            f"drifts in {storm.input or 'the inputs'} dimensions {dims}"
        )
    dim = dims[0]
    shapes = {t.path: t.shape for t in signature.tensors} if signature else {}
    if set(shapes) != {"x", "y"}:
        return None, (
            "bucket pads batches of `(x, y)`; this fit's batches hold "
            f"{sorted(shapes) or 'unread inputs'}"
        )
    pad_value, why = _mask_value(model)
    if why:
        return None, why
    y = shapes["y"]
    labels = len(y) > dim and y[dim] == shapes["x"][dim]
    masked_loss = False
    if labels:
        why = _weighted_labels(model)
        if why:
            return None, why
        outputs = getattr(model, "outputs", None) or []
        if len(outputs) != 1:
            return None, "bucket pads the labels of a model with one output"
        # Keras divides a loss whose prediction carries a mask by the
        # mask's count; else by every position.
        masked_loss = getattr(outputs[0], "_keras_mask", None) is not None
    plan = {"dim": dim, "pad_value": pad_value, "labels": labels}
    return {**plan, "masked_loss": masked_loss}, ""


def _layers(model: Any) -> list:
    """Every layer under `model`, nested models' included."""
    out = []
    for layer in getattr(model, "layers", []):
        out.append(layer)
        if getattr(layer, "layers", None):
            out.extend(_layers(layer))
    return out


def _mask_value(model: Any) -> tuple[Any, str]:
    """The padding value the model masks, or why it masks none."""
    import keras

    value = None
    for layer in _layers(model):
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if isinstance(layer, keras.layers.Embedding):
            if not layer.mask_zero:
                return None, (
                    f"layer `{layer.name}` (Embedding) has mask_zero=False: "
                    "the padding would be read as tokens"
                )
            value = 0 if value is None else value
        elif isinstance(layer, keras.layers.Masking):
            value = layer.mask_value if value is None else value
        elif not getattr(layer, "supports_masking", False):
            if getattr(layer, "layers", None):
                continue  # a nested model: its layers are checked
            return None, (
                f"layer `{layer.name}` ({type(layer).__name__}) does not "
                "support masking, so padding would change what it computes"
            )
    if value is None:
        return None, (
            "no layer masks the padding (`Embedding(mask_zero=True)` or "
            "`Masking`), so padding would change the model's result"
        )
    return value, ""


def _weighted_labels(model: Any) -> str:
    """Why labels padded with zero weights would change the loss or a
    metric ("" where they would not). Read from what `compile()` was
    given (its config's serialization reads the optimizer's variables,
    which JAX's trainer holds apart during a fit)."""
    given = getattr(getattr(model, "_compile_config", None), "config", None)
    if not isinstance(given, dict):
        return "the model's compile arguments could not be read"
    if given.get("metrics"):
        return (
            "compile(metrics=...) counts every label position, padded or "
            "not; pass them as weighted_metrics"
        )
    loss = given.get("loss")
    if isinstance(loss, (dict, list, tuple)):
        return "the model has a loss per output; bucket pads one label"
    reduction = getattr(loss, "reduction", None)
    if reduction not in (None, "sum_over_batch_size"):
        return (
            f"the loss reduces with {reduction!r}; padded labels keep the "
            "loss only under 'sum_over_batch_size'"
        )
    return ""

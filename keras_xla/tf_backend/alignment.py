"""Tensor-core alignment: sizes that keep low-precision math off them.

Under float16/bfloat16 on a GPU, matmuls and convolutions run on tensor
cores only when their sizes are multiples of 8.
"""

from __future__ import annotations

from keras_xla.tf_backend.environment import device_infos


def tensor_core_misalignment(model, batch_size, devices=None) -> list[str]:
    """Sizes that keep float16/bfloat16 matmuls and convolutions off a
    GPU's tensor cores (not multiples of 8): `Dense` units, convolution
    filters and the batch size. Empty without a GPU or in float32."""
    if not any(d.device_type == "GPU" for d in device_infos(devices)):
        return []
    out = []
    for layer in model._flatten_layers(include_self=False):
        if getattr(layer, "compute_dtype", None) not in ("float16", "bfloat16"):
            continue
        size = getattr(layer, "units", None) or getattr(layer, "filters", 0)
        if isinstance(size, int) and size % 8:
            kind = "units" if hasattr(layer, "units") else "filters"
            out.append(f"{layer.name} {kind}={size}")
    if out and batch_size and batch_size % 8:
        out.append(f"batch size {batch_size}")
    return out

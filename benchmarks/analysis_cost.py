"""What XLATuner's default HLO analysis costs: compilations and seconds.

Two models, a small CNN and a BERT-like encoder (token and position
embeddings, two transformer blocks of multi-head attention, LayerNorm and
a GELU MLP, built from Keras layers), each trained for one epoch twice in
one process under the TF profiler: with the default tuner and with
`analyze_hlo=False`. Printed side by side: the XLA compilations the
profiler saw (`Compiler::RunBackend` events; the goal is 0 extra), the
analysis's own wall time (`report.hlo.analysis_seconds`) and its share of
the first epoch (goal under 2%). With `--compile` the old route
(`analyze_hlo="compile"`, which optimizes the step again) is measured too.

Run: python benchmarks/analysis_cost.py [--steps 40] [--compile]
"""

import argparse
import os
import platform
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras_xla  # noqa: E402, I001  (first: before TensorFlow starts)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_xla.core.render import format_table  # noqa: E402
from keras_xla.tf_backend.profiler import read_compile_events  # noqa: E402

BATCH = 16


def cnn():
    inputs = keras.Input((32, 32, 3))
    x = inputs
    for filters in (16, 32, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same")(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(10)(x)
    return keras.Model(inputs, outputs), "image"


def bert_like(vocab=1000, length=64, width=128, heads=4, blocks=2):
    tokens = keras.Input((length,), dtype="int32")
    x = keras.layers.Embedding(vocab, width)(tokens)
    positions = keras.layers.Embedding(length, width)(
        keras.ops.arange(length)[None, :]
    )
    x = keras.layers.LayerNormalization()(x + positions)
    for _ in range(blocks):
        attended = keras.layers.MultiHeadAttention(heads, width // heads)(x, x)
        x = keras.layers.LayerNormalization()(x + attended)
        hidden = keras.layers.Dense(4 * width, activation="gelu")(x)
        x = keras.layers.LayerNormalization()(
            x + keras.layers.Dense(width)(hidden)
        )
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, keras.layers.Dense(2)(pooled)), "tokens"


def data(kind, steps):
    rng = np.random.default_rng(0)
    n = steps * BATCH
    if kind == "image":
        x = rng.random((n, 32, 32, 3), dtype=np.float32)
        y = rng.integers(0, 10, n)
    else:
        x = rng.integers(0, 1000, (n, 64)).astype("int32")
        y = rng.integers(0, 2, n)
    return x, y


def run(build, analyze, steps):
    keras.utils.set_random_seed(0)
    model, kind = build()
    model.compile(
        "adam",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = data(kind, steps)
    tuner = keras_xla.XLATuner(verbose=0, analyze_hlo=analyze)
    log_dir = tempfile.mkdtemp()
    tf.profiler.experimental.start(log_dir)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[tuner]
        )
    epoch_seconds = time.perf_counter() - start
    tf.profiler.experimental.stop()
    hlo = tuner.report.hlo
    return {
        "compilations": len(read_compile_events(log_dir)),
        "tuner": tuner.report.total_compilations,
        "epoch_s": epoch_seconds,
        "analysis_s": hlo.analysis_seconds if hlo else None,
        "fusion": hlo.fusion_ratio if hlo else None,
        "source": hlo.source if hlo else "-",
    }


def _number(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also measure analyze_hlo='compile' (the old route)",
    )
    args = parser.parse_args()
    settings = [False, True] + (["compile"] if args.compile else [])
    rows = [
        (
            "model",
            "analyze_hlo",
            "compilations",
            "extra",
            "analysis s",
            "share of epoch",
            "fusion ratio",
            "source",
        )
    ]
    for name, build in (("CNN", cnn), ("BERT-like", bert_like)):
        base = None
        for analyze in settings:
            r = run(build, analyze, args.steps)
            base = r["compilations"] if base is None else base
            share = (
                f"{100 * r['analysis_s'] / r['epoch_s']:.2f}%"
                if r["analysis_s"] is not None
                else "-"
            )
            rows.append(
                (
                    name,
                    str(analyze),
                    f"{r['compilations']} (tuner {r['tuner']})",
                    str(r["compilations"] - base),
                    "-"
                    if r["analysis_s"] is None
                    else f"{r['analysis_s']:.3f}",
                    share,
                    _number(r["fusion"], 3),
                    r["source"],
                )
            )
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores, TensorFlow {tf.__version__}, {args.steps} steps of "
        f"batch {BATCH}, one epoch"
    )
    print("\n".join(format_table(rows)))


if __name__ == "__main__":
    main()

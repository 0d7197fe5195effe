"""What each recompilation-storm mode costs on a keras-io NER-like fit.

The case of keras-io's "Named Entity Recognition using Transformers":
sentences of natural lengths, `padded_batch` to each batch's longest
(so nearly every batch has a new length), a small transformer tagging
each token. Synthetic data of those shapes: 1,920 sentences, lengths
drawn around 14 tokens with a long tail to 90, batch 32, reshuffled
each epoch (seeded), 2 epochs.

Modes, each in its own process on a fresh model (JAX would reuse
another mode's programs within one), in one run of this script, on the
backend named: no XLA, XLA with no guard, the guard's `fallback`,
`per_shape` and `bucket` (the model masks its padding, so padding to
buckets keeps its result). Prints per mode: the fit's wall time (to its
last step), the median steady step, XLA's compilations and their
seconds, and for the guard what it did.

Run: python benchmarks/storm_modes.py [--backend tensorflow|jax|both]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

MODES = {
    "no XLA": {"jit_compile": False},
    "XLA, no guard": {"max_recompilations": None},
    "fallback": {"on_recompile_storm": "fallback"},
    "per_shape": {"on_recompile_storm": "per_shape"},
    "bucket": {"on_recompile_storm": "bucket"},
}


def dataset(epoch_seed):
    """The padded batches of one epoch, as numpy: `(tokens, tags)`."""
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(2.5, 0.55, 1920).astype(int), 2, 90)
    order = np.random.default_rng(epoch_seed).permutation(len(lengths))
    batches = []
    for start in range(0, len(order), 32):
        chosen = lengths[order[start : start + 32]]
        width = int(chosen.max())
        tokens = np.zeros((len(chosen), width), "int32")
        tags = np.zeros((len(chosen), width), "int32")
        for row, n in enumerate(chosen):
            tokens[row, :n] = rng.integers(1, 2000, n)
            tags[row, :n] = rng.integers(1, 10, n)
        batches.append((tokens, tags))
    return batches


def model():
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int32")
    # Masked (token 0 is padding), so padding to buckets keeps its result.
    x = keras.layers.Embedding(2000, 64, mask_zero=True)(inputs)
    attention = keras.layers.MultiHeadAttention(4, 16)(x, x)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attention]))
    ff = keras.layers.Dense(128, activation="relu")(x)
    ff = keras.layers.Dense(64)(ff)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, ff]))
    outputs = keras.layers.Dense(10)(x)
    return keras.Model(inputs, outputs)


def child(mode, log_dir):
    import keras

    import keras_xla

    class Epochs(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.epoch = 0
            self.batches = dataset(0)

        def __len__(self):
            return len(self.batches)

        def __getitem__(self, i):
            return self.batches[i]

        def on_epoch_end(self):
            self.epoch += 1
            self.batches = dataset(self.epoch)

    args = dict(MODES[mode])
    net = model()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    net.compile("adam", loss, jit_compile=args.get("jit_compile", True))
    tuner = keras_xla.XLATuner(
        log_dir=log_dir, verbose=0, baseline=False, **args
    )
    began = time.perf_counter()
    net.fit(Epochs(), epochs=2, shuffle=False, verbose=0, callbacks=[tuner])
    wall = time.perf_counter() - began
    report = tuner.report
    steady = [e.step_time_ms.get("median") or 0.0 for e in report.epochs]
    g = report.guard
    print(
        json.dumps(
            {
                "wall_seconds": wall,
                "median_ms": steady,
                "compilations": len(report.compile_log),
                "compile_seconds": sum(
                    c.compile_seconds for c in report.compile_log
                ),
                "guard": g.to_dict() if g else None,
            }
        )
    )


def run_backend(backend, log_root):
    rows = {}
    for mode in MODES:
        env = {**os.environ, "KERAS_BACKEND": backend}
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--log-dir",
             os.path.join(log_root, backend, mode.replace(" ", "_"))],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    from keras_xla.core.hardware import cpu_model

    print(
        f"\n{backend}; machine: {cpu_model() or platform.machine()}, "
        f"{os.cpu_count()} cores; NER-like transformer, 60 batches of 32 "
        "padded to their longest sentence, 2 epochs"
    )
    print(
        f"{'mode':>14} {'fit s':>7} {'median ms (epochs)':>20} "
        f"{'compiles':>9} {'compile s':>10}  guard"
    )
    from keras_xla.core.render import guard_line
    from keras_xla.core.sections import GuardSection

    for mode, r in rows.items():
        g = r["guard"]
        said = ""
        if g:
            said = f"{g['action']} from step {g['off_from'] or g['step']}"
            if g["action"] == "bucket":
                said += f": edges {g['edges']}"
            if g["action"] == "per_shape":
                said += (
                    f": {g['xla_steps']} steps XLA, {g['plain_steps']} without"
                )
        medians = ", ".join(f"{m:.1f}" for m in r["median_ms"])
        print(
            f"{mode:>14} {r['wall_seconds']:7.1f} {medians:>20} "
            f"{r['compilations']:9d} {r['compile_seconds']:10.1f}  {said}"
        )
    for mode, r in rows.items():
        if r["guard"]:
            print(f"\n{mode}'s summary:")
            print("\n".join(guard_line(GuardSection(**r["guard"]))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="both")
    parser.add_argument("--child")
    parser.add_argument("--log-dir", default=None)
    known = parser.parse_args()
    if known.child:
        child(known.child, known.log_dir)
        return
    import tempfile

    log_root = known.log_dir or tempfile.mkdtemp(prefix="storm_modes_")
    backends = (
        ("tensorflow", "jax") if known.backend == "both" else (known.backend,)
    )
    for backend in backends:
        run_backend(backend, log_root)


if __name__ == "__main__":
    main()

"""Does JAX's op-by-op step (Keras's `jit_compile=False`) drift within a
process? And is the tuner's no-XLA step the same as the user's?

Two copies of a Dense layer on 32 features (batches of 32): one compiled
with `jit_compile=False` (what a user who turns XLA off gets), one
compiled with XLA and then switched off the way the tuner's no-XLA
baseline does it (`jit_compile=False`, `make_train_function(force=True)`).
After a warm-up fit each, they are fit for 200 steps in alternating
order, `--rounds` times; printed: each fit's wall time per step, in
order, and each copy's median.

With `--clear-at N`, `jax.clear_caches()` runs before round N: the
drift is JAX's caches growing with every op-by-op call (the rounds after
it are as fast as the first again, once the first recompiles).

`--gc off` runs it with Python's garbage collector off; `--profile`
profiles the compiled-off copy's second and last rounds and prints the
functions whose own time grew most between them.

Run: python benchmarks/jax_no_xla_drift.py [--rounds 6] [--clear-at N]
[--gc off] [--profile]
"""

import argparse
import cProfile
import gc
import os
import platform
import pstats
import statistics
import time
import warnings

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
warnings.simplefilter("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402

STEPS, BATCH = 200, 32


def build(jit):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam", loss="mse", jit_compile=jit)
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--clear-at", type=int, default=None)
    parser.add_argument("--gc", choices=("on", "off"), default="on")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.gc == "off":
        gc.disable()
    profiles = {}
    rng = np.random.default_rng(0)
    x = rng.random((BATCH * STEPS, 32), dtype=np.float32)
    y = rng.random((BATCH * STEPS, 1), dtype=np.float32)
    compiled_off = build(False)
    switched_off = build(True)
    switched_off.fit(x[: 2 * BATCH], y[: 2 * BATCH], batch_size=BATCH,
                     verbose=0)  # fmt: skip
    switched_off.jit_compile = False
    switched_off.make_train_function(force=True)
    copies = {"compiled off": compiled_off, "switched off": switched_off}
    for model in copies.values():
        model.fit(x, y, batch_size=BATCH, verbose=0)
    times = {name: [] for name in copies}
    for r in range(args.rounds):
        if r == args.clear_at:
            import jax

            jax.clear_caches()
        order = list(copies) if r % 2 == 0 else list(copies)[::-1]
        for name in order:
            profiled = args.profile and name == "compiled off"
            profiled = profiled and r in (1, args.rounds - 1)
            profile = cProfile.Profile() if profiled else None
            start = time.perf_counter()
            if profile is not None:
                profile.enable()
            copies[name].fit(x, y, batch_size=BATCH, verbose=0)
            if profile is not None:
                profile.disable()
                profiles[r] = pstats.Stats(profile).stats
            seconds = time.perf_counter() - start
            times[name].append(seconds / STEPS * 1000.0)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; keras "
          f"{keras.__version__}")  # fmt: skip
    for name, values in times.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name}: ms per step by round {shown}; median "
              f"{statistics.median(values):.2f}")  # fmt: skip
    if len(profiles) == 2:
        early, late = (profiles[r] for r in sorted(profiles))
        grew = sorted(
            ((late[k][2] - early.get(k, (0, 0, 0))[2], k) for k in late),
            reverse=True,
        )
        print("own time grown most, second round -> last (compiled off):")
        for _, key in grew[:5]:
            path, line, fn = key
            before, after = early.get(key, (0, 0, 0)), late[key]
            print(
                f"  {fn} ({os.path.basename(path)}:{line}): "
                f"{before[2] * 1000:.0f} -> {after[2] * 1000:.0f} ms in "
                f"{before[1]} -> {after[1]} calls"
            )


if __name__ == "__main__":
    main()

"""What each of the trial's heuristics buys, on ResNet-50 and a small MLP.

The trial (`keras_xla.auto.policy`) rotates windows of each candidate,
drops the clearly slower and keeps the fastest; a remembered decision
skips it next time. Beyond that it has two heuristics, each switchable in
`Tunables` (a third, running the XLA candidates in the order their no-XLA
twins ran fastest, bought nothing here and was removed; BENCHMARKS.md has
its figures):

- `predict_grid`: an unmeasured candidate whose median the XLA x
  precision grid predicts clearly slower is dropped without running;
- `payback`: an XLA candidate whose compile the run's steps left cannot
  pay back (even at zero step time, or at the grid's predicted speed) is
  dropped before it compiles.

Part one measures, one after the other in one process, each fixed
candidate (XLA off/on x float32/mixed_bfloat16) on a fresh model: its
first call's time beyond a median step (trace, compile, the fit's start)
and its step times. Part two replays the trial's policy on those
measurements (every call's seconds drawn in turn from the candidate's
measured steps; a window's first call is one more step) with each
heuristic on and off, for several run lengths, and prints each variant's
time to the run's end against the best fixed candidate's and what it
chose. The replay is exact about the policy and deterministic; what it
leaves out (switching between step functions, a trace shared between an
XLA candidate and its no-XLA twin) is the same for every variant.

Run: python benchmarks/auto_heuristics.py [--resnet-steps 24] [--mlp-steps 80]
     [--measured FILE] [--save FILE]
"""

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

POLICIES = ("float32", "mixed_bfloat16")
CANDIDATES = [(jit, policy) for jit in (False, True) for policy in POLICIES]


def _name(jit, policy):
    return f"{'xla' if jit else 'no_xla'}/{policy}"


def measure_one(build, fit, jit, policy, steps):
    """A fresh model under one fixed candidate: `(first call's excess,
    its steps' seconds)`."""
    import keras

    keras.mixed_precision.set_dtype_policy(policy)
    try:
        model = build(jit)
        starts = fit(model, steps)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    steady = gaps[1:]
    return max(gaps[0] - statistics.median(steady), 0.0), steady


def measure(args):
    """Each candidate on ResNet-50 and on the residual MLP."""
    import keras
    import precision_trial
    import train  # (examples/resnet50, via precision_trial's path)
    import verdict_truth as vt

    def clocked(model, data, **kw):
        clock = precision_trial.StepClock()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(*data, callbacks=[clock], verbose=0, **kw)
        return clock.starts

    resnet_args = argparse.Namespace(
        image_size=96, batch_size=16, steps=args.resnet_steps, seed=0
    )
    images = precision_trial.cached_batches(resnet_args)

    def resnet(jit):
        keras.utils.set_random_seed(0)
        model = train.build_model(10)
        model.compile(
            keras.optimizers.SGD(0.01, momentum=0.9),
            "sparse_categorical_crossentropy",
            jit_compile=jit,
        )
        return model

    x, y = vt.data(args.mlp_steps)

    def mlp(jit):
        keras.utils.set_random_seed(0)
        model = vt.residual_mlp()
        model.compile("adam", "mse", jit_compile=jit)
        return model

    models = {
        "ResNet-50 96x96, batch 16": (
            resnet,
            lambda m, n: clocked(m, (images,), epochs=1, steps_per_epoch=n),
            args.resnet_steps,
        ),
        f"residual MLP, batch {vt.BATCH}": (
            mlp,
            lambda m, n: clocked(
                m, (x[: n * vt.BATCH], y[: n * vt.BATCH]), batch_size=vt.BATCH
            ),
            args.mlp_steps,
        ),
    }
    out = {}
    for model_name, (build, fit, steps) in models.items():
        out[model_name] = {}
        for jit, policy in CANDIDATES:
            first, steady = measure_one(build, fit, jit, policy, steps)
            out[model_name][_name(jit, policy)] = {
                "first": first,
                "steps": steady,
            }
            print(
                f"  {model_name}, {_name(jit, policy)}: first call +{first:.2f}"
                f" s, median step {statistics.median(steady) * 1000:.1f} ms",
                flush=True,
            )
    return out


# The heuristics beyond "rotate windows, drop the clearly slower".
HEURISTICS = ("predict_grid", "payback")


def tunables(off):
    """The trial's tunables with the heuristics in `off` switched off."""
    from keras_xla.auto import policy

    return dataclasses.replace(policy.TUNABLES, **{h: False for h in off})


@dataclasses.dataclass
class Call:
    """One replayed train call (the fields the trial reads)."""

    seconds: float
    first_step: int
    compiled: bool = False
    trace_seconds: float = 0.0
    steps: int = 1

    @property
    def seconds_per_step(self):
        return self.seconds


def replay(by_name, run_steps, t, budget=0.25):
    """The trial on the measurements, with tunables `t`: `(seconds to
    run_steps, winner, candidates run, trial steps)`."""
    from keras_xla.auto import policy
    from keras_xla.auto.trial import Trial

    candidates = [policy.Candidate(j, p) for j, p in CANDIDATES]
    n = len(candidates)
    steps = policy.run_budget(budget, run_steps, 1, n, 1, t)
    calls, rounds = policy.schedule(steps or 0, n, 1, t)
    trial = Trial(candidates, candidates[0], calls, 1, rounds, tunables=t)
    trial.run_steps = run_steps
    cursor = {c: 0 for c in candidates}
    records, started = [], set()
    wall = 0.0

    def step_of(c):
        times = by_name[c.name]["steps"]
        cursor[c] += 1
        return times[cursor[c] % len(times)]

    while not trial.done:
        if trial.boundary():
            trial.close_window(records)
            if trial.done:
                break
        c = trial.current()
        trial.advance()
        seconds, first = step_of(c), c not in started
        if first:
            seconds += by_name[c.name]["first"]
            started.add(c)
        records.append(Call(seconds, len(records), c.jit and first))
        wall += seconds
    trial.close_window(records)
    winner, decision = trial.decide()
    if winner is None:
        return None, None, started, len(records)
    median = statistics.median(by_name[winner.name]["steps"])
    rest = max(run_steps - len(records), 0)
    return wall + rest * median, winner.name, started, len(records)


def replay_model(model_name, by_name, args):
    from keras_xla.core.render import format_table

    def alone(name, steps):
        m = by_name[name]
        return m["first"] + steps * statistics.median(m["steps"])

    print(f"\n{model_name}:")
    for name, m in by_name.items():
        print(
            f"  {name}: first call +{m['first']:.2f} s, median step "
            f"{statistics.median(m['steps']) * 1000:.1f} ms"
        )
    variants = [("none (rotate, drop slower)", HEURISTICS)]
    variants += [
        (f"only {h}", [o for o in HEURISTICS if o != h]) for h in HEURISTICS
    ]
    variants += [("both", [])]
    table = [("variant", *(f"{n} steps" for n in args.lengths))]
    for label, off in variants:
        row = [label]
        for n in args.lengths:
            best = min(alone(k, n) for k in by_name)
            total, winner, started, used = replay(by_name, n, tunables(off))
            if total is None:
                row.append(f"undecided ({used} steps)")
                continue
            xla = sum(c.jit for c in started)
            row.append(f"{best / total:.3f} {winner} ({xla} XLA compiled)")
        table.append(tuple(row))
    print("  speed to the run's end against the best fixed candidate:")
    print("\n".join("  " + line for line in format_table(table)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resnet-steps", type=int, default=24)
    parser.add_argument("--mlp-steps", type=int, default=80)
    parser.add_argument("--measured", help="measurements saved by --save")
    parser.add_argument("--save", help="where to save the measurements")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[60, 120, 300, 1500]
    )
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores", flush=True)
    if args.measured:
        with open(args.measured, encoding="utf-8") as f:
            measured = json.load(f)
    else:
        sys.path.insert(
            0, os.path.join(os.path.dirname(HERE), "examples", "resnet50")
        )
        measured = measure(args)
        if args.save:
            with open(args.save, "w", encoding="utf-8") as f:
                json.dump(measured, f)
    for model_name, by_name in measured.items():
        replay_model(model_name, by_name, args)


if __name__ == "__main__":
    main()

"""ResNet-50: "auto" against every fixed XLA/precision candidate, and a
second "auto" run that starts on the remembered decision.

In one process, one after the other, a fresh ResNet-50 (synthetic images,
fixed-size slices: one input shape) trains the same number of steps under
each fixed candidate (XLA off/on x float32/mixed_bfloat16; XLA off and
float32 is Keras's default on a CPU), then twice under
`XLATuner(jit_compile="auto", mixed_precision="auto")`: the first run
measures (the trial), the second finds the first one's decision (same
model, inputs, hardware, versions) and runs no trial. Printed, with the
goals of the "auto" issue:

- steady throughput of auto (late steps) against the reference, the best
  fixed candidate's (goal >= 0.95);
- time to 120 and to N steps of auto against the reference's (goal >=
  0.85 for the first run, >= 0.97 for the second);
- the ceiling at step 120 and at step N of any trial that measures the
  same candidates: it pays a first call (trace, XLA compile) for each,
  where the best fixed run pays one; and how close to it auto came;
- auto's decisions, with the trial's steps, seconds and dropped
  candidates.

Runs done one after the other drift on a shared machine (8-32% within
one run of this script). So the best fixed candidate runs a second time
right after auto's first run, and auto is judged against the mean of the
best fixed candidate's two runs, one before and one after it (the
"reference"); their ratio to each other is printed as the drift, and a
ratio closer to its goal than half their spread is said to be inside the
drift. The order: the four fixed candidates, auto's first run, the best
fixed candidate again, auto's second run.

Run: python benchmarks/auto_resnet.py [--steps 300]
"""

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import precision_trial  # noqa: E402  (the runs and their step clock)

from keras_xla.core.render import decision_markdown, format_table  # noqa: E402


def time_to(row, steps):
    """Seconds from the first step's start to step `steps`' end."""
    starts = row["starts"]
    return starts[min(steps, len(starts) - 1)] - starts[0]


def spread_to(a, b, ref, steps):
    """How far apart two runs' times to `steps` are, against their mean."""
    return abs(time_to(a, steps) - time_to(b, steps)) / time_to(ref, steps)


def reference(a, b):
    """The mean of one configuration's two runs: step start times, steady
    throughput and first call's excess."""
    n = min(len(a["starts"]), len(b["starts"]))
    starts = [
        (x - a["starts"][0] + y - b["starts"][0]) / 2
        for x, y in zip(a["starts"][:n], b["starts"][:n])
    ]
    return {
        "name": f"{a['name']}, mean of its two runs",
        "compilations": a["compilations"],
        "starts": starts,
        "steady": (a["steady"] + b["steady"]) / 2,
        "first_excess": (a["first_excess"] + b["first_excess"]) / 2,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    precision_trial.add_resnet_args(parser, steps=300)
    parser.add_argument("--budget", type=float, default=0.25)
    args = parser.parse_args()
    # A fresh decision memory: the first auto run must measure.
    os.environ["KERAS_XLA_CACHE_DIR"] = tempfile.mkdtemp(prefix="auto_resnet_")
    ds = precision_trial.cached_batches(args)
    print(precision_trial.machine_line(args, "run"), flush=True)
    fixed = [
        precision_trial.run(name, j, p, args, ds)
        for name, j, p in precision_trial.FIXED
    ]
    best = max(fixed, key=lambda r: r["steady"])
    spec = next(f for f in precision_trial.FIXED if f[0] == best["name"])
    first = precision_trial.run("auto (first run)", "auto", "auto", args, ds)
    again = precision_trial.run(f"{best['name']} (again)", *spec[1:], args, ds)
    second = precision_trial.run("auto (second run)", "auto", "auto", args, ds)
    ref = reference(best, again)
    short = min(120, args.steps)
    table = [
        (
            "config",
            "compiles",
            f"s to {short}",
            f"s to {args.steps}",
            "img/s steady",
            "steady vs ref",
            f"speed to {short} vs ref",
            f"speed to {args.steps} vs ref",
        )
    ]
    for r in [*fixed, first, again, second, ref]:
        table.append(
            (
                r["name"],
                str(r["compilations"]),
                f"{time_to(r, short):.1f}",
                f"{time_to(r, args.steps):.1f}",
                f"{r['steady']:.2f}",
                f"{r['steady'] / ref['steady']:.2f}",
                f"{time_to(ref, short) / time_to(r, short):.2f}",
                f"{time_to(ref, args.steps) / time_to(r, args.steps):.2f}",
            )
        )
    print("\n".join(format_table(table)))
    print(f"best fixed candidate (steady state): {best['name']}")
    print(
        f"drift: its second run (after auto's first) ran at "
        f"{again['steady'] / best['steady']:.2f} of its first in steady "
        f"state, {time_to(best, args.steps) / time_to(again, args.steps):.2f}"
        f" to {args.steps} steps; the reference ({ref['name']}) is their mean"
    )
    # How far apart the reference's two runs are: a ratio closer to its
    # goal than half that is inside the machine's drift.
    spread = {
        "steady": abs(best["steady"] - again["steady"]) / ref["steady"],
        short: spread_to(best, again, ref, short),
        args.steps: spread_to(best, again, ref, args.steps),
    }
    goals = [
        (
            "auto steady vs reference",
            first["steady"] / ref["steady"],
            0.95,
            spread["steady"],
        ),
        (
            f"first run, speed to {short} vs reference",
            time_to(ref, short) / time_to(first, short),
            0.85,
            spread[short],
        ),
        (
            f"first run, speed to {args.steps} vs reference",
            time_to(ref, args.steps) / time_to(first, args.steps),
            0.85,
            spread[args.steps],
        ),
        (
            f"second run, speed to {args.steps} vs reference",
            time_to(ref, args.steps) / time_to(second, args.steps),
            0.97,
            spread[args.steps],
        ),
    ]
    for name, value, goal, apart in goals:
        verdict = "met" if value >= goal else "NOT met"
        inside = abs(value - goal) < apart / 2
        print(
            f"{name}: {value:.2f} (goal >= {goal}): {verdict}"
            + (f", inside the drift (the reference's runs {apart:.0%} apart)")
            * inside
        )
    # What any trial of these candidates must spend by any step: a
    # first call (trace, XLA compile) for each candidate it measures,
    # where the best fixed run pays one. So its time to that step is at
    # least the best fixed run's, less that run's first call's excess,
    # plus the trial's first calls' excess.
    firsts = {
        c.name: c.compile_seconds or 0.0
        for c in first["decision"].candidates
        if c.measured_steps
    }
    if len(firsts) > 1:
        named = ", ".join(f"{n} {s:.1f} s" for n, s in firsts.items())
        print(
            f"the trial's first calls took {sum(firsts.values()):.1f} s "
            f"({named}) where the reference's took "
            f"{ref['first_excess']:.1f} s"
        )
        for steps in sorted({short, args.steps}):
            t = time_to(ref, steps)
            ceiling = t / (t - ref["first_excess"] + sum(firsts.values()))
            reached = t / time_to(first, steps)
            need = t / 0.85 - t + ref["first_excess"]
            print(
                f"  a trial that measures these candidates reaches at most "
                f"{ceiling:.2f} of the reference's speed to {steps} (0.85 "
                f"needs their first calls under {need:.1f} s in all); this "
                f"one reached {reached:.2f}, {reached / ceiling:.2f} of that"
            )
    for r in (first, second):
        print(f"\n{r['name']}'s decision:\n" + decision_markdown(r["decision"]))


if __name__ == "__main__":
    main()

"""Does the verdict of a short run land on the right side of 1.0?

keras-io's LSTM seq2seq (`benchmarks/scripts/lstm_seq2seq.py`, about
200 ms a step here) under `keras-xla run --steps N` for a few short
lengths, each in a fresh process, `--repeats` times: the verdict's
speedup, its range from the baseline windows, the rounds left out as
settling, and whether it said XLA paid off. Then the truth for the same
steps: `keras-xla run --compare jit=on,off --steps N --rounds 3` (each
configuration in processes of its own, alternating), its rows' step
medians and ranges. A verdict is right when its range holds the
comparison's ratio, or when it claims no side of 1.0 the comparison
contradicts.

Run: python benchmarks/short_run_verdict.py [--steps 30 40 60]
     [--repeats 2] [--truth-steps 60]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "lstm_seq2seq.py")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")


def keras_xla_run(*args):
    command = [sys.executable, "-m", "keras_xla", "run", *args]
    return subprocess.run(
        command, env=ENV, capture_output=True, text=True, check=True
    )


def in_run(steps, where):
    keras_xla_run("--log-dir", where, "--steps", str(steps), "--verbose",
                  "0", SCRIPT)  # fmt: skip
    path = os.path.join(where, "lstm_seq2seq", "fit-1", "xla_report.json")
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    return report["verdict"], report["baseline"]


def truth(steps, where):
    done = keras_xla_run(
        "--log-dir", where, "--steps", str(steps), "--verbose", "0",
        "--rounds", "3", "--json", "--compare", "jit=on,off", SCRIPT,
    )  # fmt: skip
    rows = json.loads(done.stdout)["rows"]
    by_xla = {r["xla"]: r for r in rows if r["ok"]}
    return by_xla[False], by_xla[True]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[30, 40, 60])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--truth-steps", type=int, default=60)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        plain, xla = truth(args.truth_steps, os.path.join(tmp, "truth"))
        ratio = plain["step_ms"] / xla["step_ms"]
        print(
            f"separate runs ({args.truth_steps} steps, 3 rounds each): "
            f"no XLA {plain['step_ms']:.1f} ms "
            f"({plain['step_ms_range'][0]:.1f}-{plain['step_ms_range'][1]:.1f})"
            f", XLA {xla['step_ms']:.1f} ms "
            f"({xla['step_ms_range'][0]:.1f}-{xla['step_ms_range'][1]:.1f}):"
            f" speedup {ratio:.2f}x"
        )
        print(f"{'steps':>5} {'speedup':>8} {'range':>11} {'settling':>8} "
              f"{'paid off':>8} {'holds':>5}  headline")  # fmt: skip
        for steps in args.steps:
            for repeat in range(args.repeats):
                where = os.path.join(tmp, f"run-{steps}-{repeat}")
                v, b = in_run(steps, where)
                low, high = v.get("speedup_low"), v.get("speedup_high")
                span = "-" if low is None else f"{low:.2f}-{high:.2f}"
                holds = "-" if low is None else str(low <= ratio <= high)
                speedup = "-" if v["speedup"] is None else f"{v['speedup']:.2f}"
                print(
                    f"{steps:>5} {speedup:>8} {span:>11} "
                    f"{b.get('settling_rounds', '-')!s:>8} "
                    f"{v['paid_back']!s:>8} {holds:>5}  {v['headline']}"
                )


if __name__ == "__main__":
    main()

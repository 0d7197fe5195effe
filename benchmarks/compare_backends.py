"""Which backend and XLA setting trains a small script fastest here:
`keras-xla run --compare backend=tensorflow,jax jit=on,off` on
`compare_script.py` (a Conv1D regression, 64 steps an epoch), the table
and the answer it prints (the README's `keras-xla run` example).

Each configuration runs in its own process, alternate rounds in reverse
order until the fastest leads clearly (`keras_xla.cli.compare`).

Run: python benchmarks/compare_backends.py [--epochs 3] [--log-dir DIR]
     [--rounds 2] [--baseline]
"""

import argparse
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--log-dir", default=None, help="default: a temp dir")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="keep the tuner's no-XLA baseline windows on (off by default "
        "in a comparison)",
    )
    args = parser.parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="xla_compare_")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; "
          f"log dir {log_dir}")  # fmt: skip
    command = [
        sys.executable, "-m", "keras_xla", "run", "--log-dir", log_dir,
        "--verbose", "0", "--rounds", str(args.rounds),
        *(["--baseline"] if args.baseline else []),
        "--compare", "backend=tensorflow,jax",
        "jit=on,off", os.path.join(HERE, "compare_script.py"),
        str(args.epochs),
    ]  # fmt: skip
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())

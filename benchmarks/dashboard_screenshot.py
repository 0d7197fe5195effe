"""A screenshot of TensorBoard's XLA tab (the README's docs/dashboard.png).

Trains the tiny Conv1D model twice into one log dir, each with
`XLATuner(log_dir=...)` and a validation set: with XLA on batches of 16
with a partial last batch (`partial-batch`), and with XLA on the same
data cut to whole batches (`whole-batches`). Then starts
`tensorboard --logdir LOG_DIR` on 127.0.0.1, opens the XLA tab in
headless Chromium (`chromium`, Debian's package) at 1400 px, the first
run selected and compared with the second, and writes the PNG.

Run: python benchmarks/dashboard_screenshot.py [--out docs/dashboard.png]
     [--log-dir runs/dashboard]
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from report_example import tiny_model  # noqa: E402

from keras_xla import XLATuner  # noqa: E402

HOST = "127.0.0.1"
RUNS = ("partial-batch", "whole-batches")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def train(log_dir: str, whole_batches: bool) -> None:
    model = tiny_model()
    rng = np.random.default_rng(0)
    # 13 steps an epoch: 12 batches of 16 and a partial one of 8, enough
    # for the tuner's no-XLA baseline window.
    n = 192 if whole_batches else 200
    x = rng.random((n, 16, 4), dtype=np.float32)
    y = rng.random((n, 1), dtype=np.float32)
    vx = rng.random((20, 16, 4), dtype=np.float32)
    vy = rng.random((20, 1), dtype=np.float32)
    tuner = XLATuner(log_dir=log_dir, jit_compile=True, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            x,
            y,
            batch_size=16,
            epochs=3,
            verbose=0,
            validation_data=(vx, vy),
            callbacks=[tuner],
        )
    print(f"{os.path.basename(log_dir)}: {tuner.report.verdict.headline}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start_tensorboard(log_dir: str, log_file) -> tuple[subprocess.Popen, int]:
    """`tensorboard --logdir LOG_DIR` on 127.0.0.1, once the XLA tab
    lists every run."""
    port = free_port()
    script = shutil.which("tensorboard", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "tensorboard.main"]
    command += ["--logdir", log_dir, "--host", HOST, "--port", str(port)]
    process = subprocess.Popen(
        command + ["--load_fast=false"], stdout=log_file, stderr=log_file
    )
    url = f"http://{HOST}:{port}/data/plugin/xla/runs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with OPENER.open(url, timeout=5) as response:
                if response.read().count(b'"run"') == len(RUNS):
                    return process, port
        except OSError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise SystemExit("TensorBoard did not list the runs within 60 s")


def screenshot(url: str, out: str, width: int, height: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("No chromium: apt-get install chromium")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=15000",
            f"--window-size={width},{height}",
            f"--screenshot={os.path.abspath(out)}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("docs", "dashboard.png"))
    parser.add_argument("--log-dir", default=None, help="default: a temp dir")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1400)
    args = parser.parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="xla_dashboard_")
    for name in RUNS:
        train(os.path.join(log_dir, name), whole_batches=name != RUNS[0])
    with open(os.path.join(log_dir, "tensorboard.log"), "w") as log_file:
        process, port = start_tensorboard(log_dir, log_file)
        try:
            url = (
                f"http://{HOST}:{port}/data/plugin_entry.html?name=xla"
                f"&run={RUNS[0]}/train&compare={RUNS[1]}/train"
            )
            os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
            screenshot(url, args.out, args.width, args.height)
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(f"{args.out}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])

"""A real TensorBoard server serves what XLATuner logs.

Routes (tensorboard 2.21, `tensorboard/plugins/scalar/scalars_plugin.py`
and `tensorboard/plugins/text/text_plugin.py`, mounted under
`/data/plugin/<name>`):

- `/data/plugin/scalars/tags`: `{run: {tag: {displayName, description}}}`.
- `/data/plugin/scalars/scalars?run=R&tag=T`: `[[wall_time, step, value]]`.
- `/data/plugin/text/tags`: `{run: [tag, ...]}`.
- `/data/plugin/text/text?run=R&tag=T`: `[{wall_time, step, text}]`, the
  text rendered from Markdown to HTML.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from conftest import conv_model, regression_data

from keras_xla import XLATuner
from keras_xla.core.summaries import (
    FINDINGS_TAG,
    SCALAR_TAGS,
    STEP_TIME_TAG,
    VERDICT_TAG,
)

HOST = "127.0.0.1"
TOTAL_TIMEOUT_SECONDS = 60
POLL_SECONDS = 0.5
# No proxy: the server is on this machine.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def tensorboard_command(log_dir: str, port: int) -> list[str]:
    # The script installed with this interpreter, else the module.
    bin_dir = os.path.dirname(sys.executable)
    script = shutil.which("tensorboard", path=bin_dir)
    base = [script] if script else [sys.executable, "-m", "tensorboard.main"]
    flags = ["--logdir", log_dir, "--host", HOST, "--port", str(port)]
    return base + flags + ["--load_fast=false"]


class Server:
    """A TensorBoard child process and its HTTP API on 127.0.0.1."""

    def __init__(self, log_dir: str, log_path: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.process = subprocess.Popen(
            tensorboard_command(log_dir, self.port),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.deadline = time.monotonic() + TOTAL_TIMEOUT_SECONDS

    def get(self, path: str, **query: str) -> Any:
        url = f"http://{HOST}:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with OPENER.open(url, timeout=10) as response:
            assert response.status == 200, url
            return json.loads(response.read())

    def poll(self, path: str, ready: Callable[[Any], bool], **query) -> Any:
        """GETs `path` until `ready(body)`, within the total timeout."""
        body = error = None
        max_attempts = int(TOTAL_TIMEOUT_SECONDS / POLL_SECONDS)
        for _ in range(max_attempts):
            if self.process.poll() is not None:
                raise AssertionError(
                    f"TensorBoard exited ({self.process.returncode}):\n"
                    + self.output()
                )
            try:
                body = self.get(path, **query)
                if ready(body):
                    return body
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                error = e
            if time.monotonic() > self.deadline:
                break
            time.sleep(POLL_SECONDS)
        raise AssertionError(
            f"{path} {query} not ready within {TOTAL_TIMEOUT_SECONDS} s; "
            f"last body {body!r}, last error {error!r}:\n" + self.output()
        )

    def output(self) -> str:
        self._log.flush()
        with open(self.log_path) as f:
            return f.read()[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-epoch fit with a partial last batch, logged to a fresh dir."""
    log_dir = str(tmp_path_factory.mktemp("tensorboard") / "logs")
    x, y = regression_data(40)  # Batches of 16, 16 and a partial 8.
    tuner = XLATuner(log_dir=log_dir, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # The tuner warns per finding.
        conv_model().fit(
            x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
        )
    return log_dir, tuner.report


def test_tensorboard_serves_xla_scalars_and_findings(trained, tmp_path):
    log_dir, report = trained
    assert [e.compilations for e in report.epochs] == [2, 0]
    assert "partial-last-batch" in report.finding_codes()
    server = Server(log_dir, str(tmp_path / "tensorboard.log"))
    try:
        tags = server.poll(
            "/data/plugin/scalars/tags",
            lambda body: set(SCALAR_TAGS) <= set(body.get("train", {})),
        )
        # The contract's tags; the tuner may log more under `xla/`.
        xla_tags = {tag for tag in tags["train"] if tag.startswith("xla/")}
        assert set(SCALAR_TAGS) <= xla_tags
        epochs = report.epochs
        expected = {
            "xla/compilations": [e.compilations for e in epochs],
            "xla/recompilations": [e.recompilations for e in epochs],
            "xla/compile_seconds": [e.compile_seconds for e in epochs],
            "xla/step_time_ms_median": [
                e.step_time_ms["median"] for e in epochs
            ],
            "xla/step_time_ms_p90": [e.step_time_ms["p90"] for e in epochs],
            "xla/examples_per_second": [
                e.examples_per_second or 0.0 for e in epochs
            ],
            "xla/jit_compile": [1.0 for e in epochs],
            "xla/tuner_ms_median": [e.tuner_ms_median for e in epochs],
            "xla/unexplained_seconds": [e.unexplained_seconds for e in epochs],
        }
        assert set(expected) == set(SCALAR_TAGS)
        for tag, values in expected.items():
            points = server.poll(
                "/data/plugin/scalars/scalars",
                lambda body: len(body) == 2,
                run="train",
                tag=tag,
            )
            assert [step for _, step, _ in points] == [0, 1], tag
            # Summaries hold float32.
            served = [value for _, _, value in points]
            assert served == pytest.approx(values, rel=1e-6), tag
        compilations = server.get(
            "/data/plugin/scalars/scalars", run="train", tag="xla/compilations"
        )
        assert [value for _, _, value in compilations] == [2.0, 0.0]

        text_tags = server.poll(
            "/data/plugin/text/tags",
            lambda body: FINDINGS_TAG in body.get("train", []),
        )
        assert sorted(text_tags["train"]) == [FINDINGS_TAG, VERDICT_TAG]
        findings = server.get(
            "/data/plugin/text/text", run="train", tag=FINDINGS_TAG
        )
        # Written at epoch 0, and again only when the findings changed.
        steps = [event["step"] for event in findings]
        assert steps[0] == 0 and steps == sorted(set(steps))
        assert "partial-last-batch" in findings[-1]["text"]
        assert "<table>" in findings[-1]["text"]  # Markdown was rendered.
        (verdict,) = server.get(
            "/data/plugin/text/text", run="train", tag=VERDICT_TAG
        )[-1:]
        assert report.verdict.headline.split(":")[0] in verdict["text"]
        # One step-time point per train call, at the global train step.
        points = server.poll(
            "/data/plugin/scalars/scalars",
            lambda body: len(body) == 6,
            run="train",
            tag=STEP_TIME_TAG,
        )
        assert [step for _, step, _ in points] == list(range(6))
    finally:
        server.stop()

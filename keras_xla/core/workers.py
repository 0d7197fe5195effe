"""One worker of a job across workers: who it is, where it keeps its
report, and the chief's bounded wait for the others' reports.

A job that trains on several workers (TensorFlow's
`MultiWorkerMirroredStrategy`, JAX's multi-process runtime) runs one
tuner per worker. Each knows its `Worker` (index, count, host) and keeps
its report under the job's log dir, `<log_dir>/workers/<index>/`; the
chief (worker 0) reads them all at the end of training (`gather`: a
bounded wait, never a collective of its own). `core.job` makes the
job's report of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time

from keras_xla.core.report import REPORT_FILENAME, XLAReport

WORKERS_DIR = "workers"
# The chief's longest wait, at its training's end, for the others' final
# reports (the job's workers end together: a bounded wait is all it costs).
GATHER_SECONDS = 30.0
# It looks again after FIRST_POLL_SECONDS, each pause twice the last up
# to POLL_SECONDS: the workers end together, so the others' final
# reports come within milliseconds, and the chief waits at most about
# twice as long as it had to (a fixed 0.2 s poll cost every job 0.2 s).
FIRST_POLL_SECONDS = 0.005
POLL_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Worker:
    """Which worker of a job this process is."""

    index: int  # in the job (0 is the chief)
    count: int  # the job's workers
    host: str  # the machine's name
    engine: str  # what runs the job: `tf.distribute`, `jax.distributed`
    # What the job's workers share and another job's do not (the cluster's
    # addresses), where known.
    job: str | None = None

    @property
    def chief(self) -> bool:
        return self.index == 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def from_tf_config(text: str | None, host: str) -> Worker | None:
    """This process's `Worker` from TensorFlow's `TF_CONFIG` (JSON: the
    cluster's `chief` and `worker` addresses, this `task`'s type and
    index); None outside a cluster of several workers. The chief, where
    the cluster names one, is worker 0."""
    try:
        config = json.loads(text) if text else None
        cluster, task = config["cluster"], config["task"]
        chiefs = list(cluster.get("chief") or [])
        workers = list(cluster.get("worker") or [])
        kind, number = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    count = len(chiefs) + len(workers)
    if count < 2 or kind not in ("chief", "worker"):
        return None
    index = number if kind == "chief" else len(chiefs) + number
    job = ",".join(chiefs + workers)
    return Worker(index, count, host, "tf.distribute", job)


def worker_dir(log_dir: str, index: int) -> str:
    """Where worker `index` keeps its report and TensorBoard run."""
    return os.path.join(log_dir, WORKERS_DIR, str(index))


def read_workers(log_dir: str) -> dict[int, XLAReport]:
    """The reports kept under `<log_dir>/workers/<index>/` (those that
    cannot be read are left out: their worker counts as missing)."""
    root = os.path.join(log_dir, WORKERS_DIR)
    found: dict[int, XLAReport] = {}
    with contextlib.suppress(OSError):  # no workers' folder: none
        for name in [n for n in os.listdir(root) if n.isdigit()]:
            path = os.path.join(root, name, REPORT_FILENAME)
            with contextlib.suppress(OSError, ValueError):
                found[int(name)] = XLAReport.load(path)
    return found


def gather(
    log_dir: str,
    count: int,
    wait_seconds: float | None = None,
    clock=time.monotonic,
    sleep=time.sleep,
    own: XLAReport | None = None,
) -> dict[int, XLAReport]:
    """The workers' reports under `log_dir`, waiting up to
    `wait_seconds` (`GATHER_SECONDS`, read at the call) for each of the
    `count` workers' final report; `own`, the gathering worker's report,
    is taken as it is."""
    wait = GATHER_SECONDS if wait_seconds is None else wait_seconds
    deadline = clock() + wait
    mine = None if own is None else (own.worker or {}).get("index")
    pause = FIRST_POLL_SECONDS
    while True:
        reports = read_workers(log_dir)
        if mine is not None:
            reports[int(mine)] = own
        done = [r for r in reports.values() if (r.worker or {}).get("finished")]
        if len(done) >= count or clock() >= deadline:
            return reports
        sleep(pause)
        pause = min(2 * pause, POLL_SECONDS)

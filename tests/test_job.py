"""One job across workers: each worker's report under the job's log dir,
the chief's job report, and what only a job shows."""

import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import free_ports

from keras_xla import cli
from keras_xla.core import job, workers
from keras_xla.core.report import (
    Compilation,
    EpochStats,
    Recompilation,
    XLAReport,
)
from keras_xla.core.sections import Verdict

HERE = os.path.dirname(__file__)


def worker_report(index, count=2, step_ms=2.0, shapes=None, finished=True):
    """A worker's report: two epochs of 4 steps at `step_ms`, compiled
    for batch 8, and for each of `shapes` (a partial batch) too."""
    report = XLAReport()
    report.worker = {
        "index": index,
        "count": count,
        "host": f"host{index}",
        "engine": "tf.distribute",
        "job": "a,b",
        "finished": finished,
    }
    full = {"x": [8, 16, 4]}
    report.compile_log.append(Compilation("train", 0, 0, full, 1.0, True))
    for shape in shapes or []:
        report.compile_log.append(
            Compilation("train", 0, 3, {"x": shape}, 0.5, False)
        )
        report.recompilations.append(
            Recompilation(
                "train", 0, 3, "x", 0, [8, 16, 4], shape,
                "partial_batch", 0.5, "", "pad the last batch",
            )
        )  # fmt: skip
    compiled = len(report.compile_log)
    for epoch in range(2):
        report.epochs.append(
            EpochStats(
                epoch, 4, compiled if epoch == 0 else 0, 1.0,
                compiled - 1 if epoch == 0 else 0,
                {"median": step_ms, "p90": step_ms}, 100.0,
            )
        )  # fmt: skip
    report.verdict = Verdict(
        True, 2.0, step_ms * 2, step_ms, 1.0, 100, False, "", train_steps=8
    )
    return report


def test_a_worker_is_read_from_tf_config():
    config = {
        "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
        "task": {"type": "worker", "index": 1},
    }
    worker = workers.from_tf_config(json.dumps(config), "here")
    assert worker == workers.Worker(
        1, 2, "here", "tf.distribute", "127.0.0.1:1,127.0.0.1:2"
    )
    assert not worker.chief
    with_chief = {
        "cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"]},
        "task": {"type": "worker", "index": 0},
    }
    assert workers.from_tf_config(json.dumps(with_chief), "h").index == 1
    # One worker, no cluster, a parameter server, nonsense: not a job.
    alone = {"cluster": {"worker": ["w:1"]}, "task": config["task"]}
    assert workers.from_tf_config(json.dumps(alone), "h") is None
    assert workers.from_tf_config(None, "h") is None
    ps = {"cluster": config["cluster"], "task": {"type": "ps", "index": 0}}
    assert workers.from_tf_config(json.dumps(ps), "h") is None
    assert workers.from_tf_config("{not json", "h") is None


def test_the_job_names_the_worker_that_compiled_alone_and_the_wait():
    reports = {
        0: worker_report(0),
        1: worker_report(1, shapes=[[4, 16, 4]]),
    }
    report = job.build(reports, 2, "a,b")
    assert [w.index for w in report.workers] == [0, 1]
    assert [w.compilations for w in report.workers] == [1, 2]
    assert report.missing == []
    (alone,) = report.findings
    assert alone["code"] == "worker-compiled-alone"
    assert alone["worker"] == 1
    # Worker 0's own steps showed no wait: its compile time stands in.
    assert alone["seconds"] == 0.5
    assert "waited about 0.50 s" in alone["message"]
    assert "input `x` dim 0: [8, 16, 4] -> [4, 16, 4]" in alone["message"]
    assert alone["fix"] == "pad the last batch"
    verdict = report.verdict
    # The slowest worker sets the job's pace: 4 -> 2 ms, 2x.
    assert verdict["speedup"] == 2.0
    assert verdict["compile_seconds"] == 1.5
    assert verdict["next_steps"] == [
        {"code": "worker-compiled-alone", "worker": 1, "seconds": 0.5}
    ]


def test_the_others_wait_is_measured_by_their_own_step_there():
    waiting = worker_report(0)
    # Worker 0's step 3 of epoch 0 stood out by 0.42 s, unexplained by
    # anything of its own: the wait at the collective worker 1 compiled
    # before. A spike elsewhere, or one its own compilation explains, is
    # not the wait.
    waiting.epochs[0].spikes = [
        {"step": 3, "ms": 430.0, "seconds": 0.42, "kind": "unexplained"},
        {"step": 1, "ms": 90.0, "seconds": 0.08, "kind": "unexplained"},
    ]
    waiting.epochs[1].spikes = [
        {"step": 3, "ms": 900.0, "seconds": 0.9, "kind": "unexplained"}
    ]
    reports = {0: waiting, 1: worker_report(1, shapes=[[4, 16, 4]])}
    (alone,) = job.build(reports, 2, "a,b").findings
    assert alone["seconds"] == 0.42
    assert (
        "the other worker waited 0.42 s for it at the next collective "
        "(measured: their step 3 of epoch 0 stood out" in alone["message"]
    )
    # Two others waiting, each measured: their mean, and the sum.
    third = worker_report(2, count=3)
    third.epochs[0].spikes = [
        {"step": 3, "ms": 230.0, "seconds": 0.22, "kind": "unexplained"}
    ]
    (alone,) = job.build({**reports, 2: third}, 3, "a,b,c").findings
    assert alone["seconds"] == 0.64
    assert (
        "the other 2 workers waited 0.32 s each on average (0.64 s in "
        in (alone["message"])
    )
    waiting.epochs[0].spikes[0]["kind"] = "compile"
    (alone,) = job.build(reports, 2, "a,b").findings
    assert alone["seconds"] == 0.5
    assert "waited about 0.50 s for it" in alone["message"]


def fingerprinted(index, fingerprint, dtype="float32", **environment):
    """A worker's report whose first compilation has `fingerprint`, its
    input `x` in `dtype`, and `environment`'s settings."""
    report = worker_report(index)
    first = report.compile_log[0]
    first.fingerprint, first.dtypes = fingerprint, {"x": dtype}
    report.environment.update(environment)
    return report


def test_workers_that_compiled_another_program_for_a_step_are_named():
    same = job.build({i: fingerprinted(i, "aaaa") for i in range(2)}, 2, "a,b")
    assert same.findings == []
    assert [w.programs[0]["fingerprint"] for w in same.workers] == [
        "aaaa",
        "aaaa",
    ]
    # The same shapes and settings, another program: the code differs.
    cases = [
        ({}, {}, "the model's code or its arguments differ"),
        (
            {"dtype": "float32"},
            {"dtype": "float64"},
            "input `x`'s dtype is float32 on worker 0 and float64 on worker 1",
        ),
        (
            {"policy": "float32"},
            {"policy": "mixed_bfloat16"},
            "`policy` is float32 on worker 0 and mixed_bfloat16 on worker 1",
        ),
    ]
    for chief, other, difference in cases:
        report = job.build(
            {
                0: fingerprinted(0, "aaaa", **chief),
                1: fingerprinted(1, "bbbb", **other),
            },
            2,
        )
        (found,) = report.findings
        assert (found["code"], found["worker"]) == (
            "worker-program-differs",
            1,
        )
        assert "train step 0 of epoch 0" in found["message"]
        assert "bbbb and aaaa" in found["message"]
        assert difference in found["message"]
    # A worker without fingerprints (its backend gave none) is not
    # compared.
    report = job.build({0: fingerprinted(0, "aaaa"), 1: worker_report(1)}, 2)
    assert report.findings == []


def test_a_straggler_and_a_missing_worker():
    reports = {i: worker_report(i, count=4) for i in range(3)}
    reports[2] = worker_report(2, count=4, step_ms=3.0)
    report = job.build(reports, 4)
    codes = {(f["code"], f["worker"]) for f in report.findings}
    assert codes == {("straggler", 2), ("worker-missing", 3)}
    (straggler,) = [f for f in report.findings if f["code"] == "straggler"]
    # 1 ms slower than the others' 2 ms, for 8 steps.
    assert straggler["seconds"] == 0.008
    assert report.missing == [3]
    # Its slowest worker's steps: 6 -> 3 ms.
    assert report.verdict["xla_step_ms"] == 3.0
    assert report.verdict["slowest_worker"] == 2
    assert report.verdict["headline"].startswith("The job (3 of 4 workers)")
    # Equal workers: nothing to say.
    even = job.build({i: worker_report(i) for i in range(2)}, 2)
    assert even.findings == []


def test_the_chief_waits_for_the_workers_final_reports_at_most_so_long(
    tmp_path,
):
    log_dir = str(tmp_path)
    for index, finished in ((0, True), (1, False)):
        where = workers.worker_dir(log_dir, index)
        os.makedirs(where)
        worker_report(index, finished=finished).write(where)
    now, pauses = [0.0], []

    def sleep(seconds):
        now[0] += seconds
        pauses.append(seconds)

    reports = workers.gather(log_dir, 2, 5.0, clock=lambda: now[0], sleep=sleep)
    # Worker 1 never finished: the chief gave up after 5 s and has both.
    assert 5.0 <= now[0] < 5.0 + 2 * workers.POLL_SECONDS
    # It looks again soon, then less often: each pause twice the last,
    # up to POLL_SECONDS.
    assert pauses[:3] == [workers.FIRST_POLL_SECONDS * 2**n for n in range(3)]
    assert max(pauses) == workers.POLL_SECONDS
    assert sorted(reports) == [0, 1]
    # Its last report is in the job's table, and it is named: it never
    # wrote its final one.
    unfinished = job.build(reports, 2)
    assert [w.index for w in unfinished.workers] == [0, 1]
    (found,) = unfinished.findings
    assert (found["code"], found["worker"]) == ("worker-missing", 1)
    assert "never wrote its final report" in found["message"]
    assert "after 8 train steps" in found["message"]
    now[0] = 0.0
    worker_report(1).write(workers.worker_dir(log_dir, 1))
    workers.gather(log_dir, 2, 5.0, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 0.0  # both had finished: no wait


def test_the_cli_merges_separate_log_dirs_into_the_job(tmp_path, capsys):
    dirs = []
    for index in range(2):
        where = tmp_path / f"w{index}"
        where.mkdir()
        shapes = [[4, 16, 4]] if index else None
        worker_report(index, shapes=shapes).write(str(where))
        dirs.append(str(where))
    assert cli.main(["report", *dirs]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The job (2 of 2 workers): XLA made each")
    assert "[worker-compiled-alone] worker 1 (0.50 s)" in out
    assert cli.main(["report", "--json", *dirs]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert [w["host"] for w in merged["workers"]] == ["host0", "host1"]
    # Three reports that are not one job's: a clear line, no traceback.
    plain = tmp_path / "plain"
    plain.mkdir()
    XLAReport().write(str(plain))
    assert cli.main(["report", str(plain), str(plain), str(plain)]) == 2
    assert "give one run, two to compare" in capsys.readouterr().err


def run_workers(commands, envs, codes=(0, 0)):
    """Each worker's last line as JSON (None where it printed none), after
    checking each exited with its code of `codes`."""
    procs = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for command, env in zip(commands, envs)
    ]
    outs = []
    for proc, code in zip(procs, codes):
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == code, stderr[-3000:]
        lines = stdout.strip().splitlines()
        outs.append(json.loads(lines[-1]) if lines else None)
    return outs


def tf_job(tmp_path, *extra, codes=(0, 0)):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    commands, envs = [], []
    for index in range(2):
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}
        )
        dump = str(tmp_path / f"dump{index}")
        script = os.path.join(HERE, "job_run.py")
        log_dir = str(tmp_path / "logs")
        commands.append([sys.executable, script, "tf", log_dir, dump])
        commands[-1] += list(extra)
        envs.append(env)
    return run_workers(commands, envs, codes)


@pytest.mark.parametrize("uneven", [False, True], ids=["even", "uneven"])
def test_two_tensorflow_workers_make_one_job_report(tmp_path, uneven):
    outs = tf_job(tmp_path, *(["uneven"] if uneven else []))
    for index, out in enumerate(outs):
        assert out["worker"]["index"] == index
        assert out["worker"]["count"] == 2
        assert out["worker"]["finished"] is True
        # Each worker's count is what XLA itself compiled there.
        assert out["compilations"] == out["dumped"]
        where = workers.worker_dir(str(tmp_path / "logs"), index)
        assert os.path.isfile(os.path.join(where, "xla_report.json"))
    report = outs[0]["job"]
    assert [w["index"] for w in report["workers"]] == [0, 1]
    assert [w["compilations"] for w in report["workers"]] == [
        out["compilations"] for out in outs
    ]
    codes = [(f["code"], f["worker"]) for f in report["findings"]]
    # The gradients were all-reduced: the workers' weights are equal.
    for a, b in zip(outs[0]["weights"], outs[1]["weights"]):
        assert a == b
    # Each compiled step's program fingerprint, read from XLA's own
    # record of it (no compilation of the tuner's).
    assert all(all(out["fingerprints"]) for out in outs)
    if not uneven:
        assert outs[0]["shapes"] == outs[1]["shapes"]
        # The same program on both workers.
        assert outs[0]["fingerprints"] == outs[1]["fingerprints"]
        assert ("worker-compiled-alone", 1) not in codes
        assert "worker-program-differs" not in [c for c, _ in codes]
    else:
        # Worker 1's short last batch compiled the step for it alone.
        assert ("worker-compiled-alone", 1) in codes
        (alone,) = [f for f in report["findings"] if f["worker"] == 1]
        assert "input `x` dim 0" in alone["message"]
        # Worker 0's step at that collective stood out: the measured wait.
        assert "(measured: their step 3 of epoch 0" in alone["message"]
        assert alone["seconds"] > 0
    assert "worker-missing" not in [c for c, _ in codes]
    # The chief's run carries the job report for the XLA tab.
    from tensorboard.backend.event_processing import event_accumulator

    chief = workers.worker_dir(str(tmp_path / "logs"), 0)
    events = event_accumulator.EventAccumulator(
        os.path.join(chief, "train"),
        size_guidance={event_accumulator.TENSORS: 0},
    )
    events.Reload()
    (tensor,) = events.Tensors("xla/job")
    from tensorboard.util import tensor_util

    text = tensor_util.make_ndarray(tensor.tensor_proto).item().decode()
    assert json.loads(text)["workers"] == report["workers"]


@pytest.mark.parametrize("mode", ["baseline", "auto"])
def test_two_tensorflow_workers_end_in_the_same_configuration(tmp_path, mode):
    # The no-XLA windows switch each worker's step at the steps the counts
    # set (no extra round on one worker's clock); "auto" skips the trial
    # on every worker. Both train on in XLA, their all-reduced weights
    # equal.
    outs = tf_job(tmp_path, mode)
    assert [out["jit"] for out in outs] == [True, True]
    # Each worker's count is what XLA itself compiled there.
    assert [out["compilations"] for out in outs] == [
        out["dumped"] for out in outs
    ]
    for a, b in zip(outs[0]["weights"], outs[1]["weights"]):
        assert a == b
    report = outs[0]["job"]
    assert [w["index"] for w in report["workers"]] == [0, 1]
    assert report["missing"] == []
    if mode == "auto":
        assert [out["decision"] for out in outs] == ["skipped"] * 2
        return
    # Each worker measured both sides, in the same windows.
    spans = [out["baseline"]["span"] for out in outs]
    assert spans[0] == spans[1] and spans[0]
    assert [out["baseline"]["rounds"] for out in outs] == [2, 2]
    for out in outs:
        assert out["baseline"]["no_xla_step_ms"] > 0
        assert out["baseline"]["xla_step_ms"] > 0


def test_a_worker_that_died_is_named_and_the_job_report_written(tmp_path):
    # Worker 1 died as its training ended (exit code 3), before its final
    # report; the chief waited its bounded while and wrote the job's.
    chief, dead = tf_job(tmp_path, "killed", codes=(0, 3))
    assert dead is None
    report = chief["job"]
    assert [(w["index"], w["finished"]) for w in report["workers"]] == [
        (0, True),
        (1, False),
    ]
    (missing,) = [f for f in report["findings"] if f["worker"] == 1]
    assert missing["code"] == "worker-missing"
    assert "never wrote its final report" in missing["message"]
    # Its row is its last epoch's report: 4 steps an epoch, 2 epochs.
    assert report["workers"][1]["train_steps"] == 8


# "auto" in a job skips the trial on every worker (unit: test_architecture's
# `request(workers=2)`); the live two-process run of it is slow, and the
# default run's job plants another program on worker 1 ("differ": XLA on).
@pytest.mark.parametrize(
    "jit", ["differ", pytest.param("auto", marks=pytest.mark.slow)]
)
def test_two_jax_processes_make_one_job_report(tmp_path, jit):
    (port,) = free_ports(1)
    log_dir = str(tmp_path / "logs")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_XLA_FLAGS", "XLA_FLAGS", "KERAS_BACKEND")
    }
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    script = os.path.join(HERE, "job_run.py")
    commands = [
        [sys.executable, script, "jax", log_dir, str(index), str(port), jit]
        for index in range(2)
    ]
    outs = run_workers(commands, [env, env])
    # Every worker ends in the same configuration: XLA on. With "auto",
    # no worker's clock decided (the trial is skipped in a job); with XLA
    # on, the no-XLA baseline windows ran at the same steps on both.
    assert [out["jit"] for out in outs] == [True, True]
    if jit == "auto":
        assert [out["decision"] for out in outs] == ["skipped"] * 2
    else:
        spans = [out["baseline"]["span"] for out in outs]
        assert spans[0] == spans[1] and spans[0]
    for index, out in enumerate(outs):
        assert out["worker"]["index"] == index
        assert out["worker"]["engine"] == "jax.distributed"
        # JAX's own compile events of the train step, on each process.
        assert out["compilations"] == out["events"] >= 1
    report = outs[0]["job"]
    assert [w["index"] for w in report["workers"]] == [0, 1]
    assert report["missing"] == []
    # One SPMD program: both processes compiled the same shapes.
    assert outs[0]["shapes"] == outs[1]["shapes"]
    codes = [(f["code"], f["worker"]) for f in report["findings"]]
    assert "worker-compiled-alone" not in [c for c, _ in codes]
    fingerprints = [out["fingerprints"] for out in outs]
    assert all(fingerprints[0]) and all(fingerprints[1])
    if jit == "auto":
        # The same model on both: the same programs.
        assert fingerprints[0] == fingerprints[1]
        assert "worker-program-differs" not in [c for c, _ in codes]
        return
    # Worker 1's model computes tanh where worker 0's computes relu: the
    # same shapes and collectives, another program at every compiled
    # step, each named.
    assert all(a != b for a, b in zip(*fingerprints))
    differs = [
        f for f in report["findings"] if f["code"] == "worker-program-differs"
    ]
    assert [f["worker"] for f in differs] == [1] * len(fingerprints[0])
    assert "the model's code or its arguments differ" in differs[0]["message"]


def dense_fit(log_dir):
    """A tuner on a Dense model's fits of 4 batches an epoch into
    `log_dir`: `(tuner, fit(epochs=...) -> the optimizer's steps)`."""
    import keras
    import numpy as np

    from keras_xla import XLATuner

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=True)
    x = np.random.rand(32, 4).astype("float32")
    y = np.random.rand(32, 1).astype("float32")
    tuner = XLATuner(log_dir=str(log_dir), verbose=0, baseline=False)

    def fit(epochs):
        model.fit(
            x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[tuner]
        )
        return int(model.optimizer.iterations)

    return tuner, fit


HOLDER = """
import sys, time
from keras_xla.core import files
from keras_xla.core.report import XLAReport
fd = files.hold(sys.argv[1] + "/xla_report.json")
XLAReport(environment={"run": "the other"}).write(sys.argv[1])
print("held" if fd is not None else "not held", flush=True)
sys.stdin.read()  # until the test is done
"""


def test_two_fits_sharing_a_log_dir_keep_each_others_report(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    # Another process's fit holds the log dir, with its report there.
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(log_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "held"
        tuner, fit = dense_fit(log_dir)
        fit(epochs=2)
    finally:
        other.stdin.close()
        other.wait(timeout=60)
    # The other fit's report is where it was, not archived.
    names = sorted(os.listdir(log_dir))
    assert "xla_report.1.json" not in names
    kept = XLAReport.load(str(log_dir / "xla_report.json"))
    assert kept.environment == {"run": "the other"}
    # This fit's went beside it, and says so.
    mine = log_dir / f"{socket.gethostname()}-{os.getpid()}"
    assert XLAReport.load(str(mine)).total_compilations == 1
    assert "log-dir-shared" in tuner.report.finding_codes()
    # Alone in the log dir, the next fit writes there, as always.
    fit(epochs=1)
    assert XLAReport.load(str(log_dir)).epochs[0].steps == 4
    assert os.path.isfile(log_dir / "xla_report.1.json")  # the other's


def test_the_tab_shows_the_job_on_each_workers_run():
    from keras_xla.dashboard import views

    assert views.chief_run("workers/1/train") == "workers/0/train"
    assert views.chief_run("sweep/a/workers/3/train") == (
        "sweep/a/workers/0/train"
    )
    assert views.chief_run("train") is None
    assert views.chief_run("workers/x/train") is None
    reports = {0: worker_report(0), 1: worker_report(1, shapes=[[4, 16, 4]])}
    report = job.build(reports, 3)
    view = views.job_view(json.loads(report.to_json()), "workers/1/train")
    assert [
        (w["worker"], w["this"], w["made_wait"]) for w in view["workers"]
    ] == [
        (0, False, False),
        (1, True, True),  # its partial batch made the other wait
    ]
    assert view["missing"] == [2]
    assert view["headline"].startswith("The job (2 of 3 workers)")
    codes = [f["code"] for f in view["findings"]]
    assert codes == ["worker-compiled-alone", "worker-missing"]


def test_a_worker_that_cannot_write_trains_and_the_chief_names_it(
    tmp_path, monkeypatch
):
    from keras_xla import backends

    log_dir = tmp_path / "logs"
    (log_dir / "workers").mkdir(parents=True)
    (log_dir / "workers" / "1").write_text("not a folder")
    monkeypatch.setattr(workers, "GATHER_SECONDS", 0.5)

    def fit_as(index):
        worker = workers.Worker(index, 2, "here", "tf.distribute", "j")
        monkeypatch.setattr(backends, "worker", lambda model: worker)
        tuner, fit = dense_fit(log_dir)
        assert fit(epochs=1) == 4  # every step trained
        return tuner.report

    # Worker 1's folder cannot be made: it trains, and says so.
    assert "output-failed" in fit_as(1).finding_codes()
    # The chief waits its bounded while, then names worker 1 missing.
    chief = fit_as(0)
    assert chief.worker["finished"] is True
    report = job.JobReport.load(str(log_dir / job.JOB_FILENAME))
    assert report.missing == [1]
    assert report.codes() == ["worker-missing"]

"""Auto-clustering: detected, counted from the compile ledger against the
profiler, explained, and said when it is asked for but inactive."""

import json
import os
import subprocess
import sys

import pytest

from keras_xla.tf_backend import autoclustering

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize(
    "flags, set_jit, gpus, requested, active",
    [
        ("", "", 0, False, False),
        ("", "autoclustering", 0, True, False),  # CPU needs the flag
        ("--tf_xla_cpu_global_jit", "autoclustering", 0, True, True),
        ("", "autoclustering", 1, True, True),  # a GPU: set_jit suffices
        ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", "", 0, True, True),
        ("--tf_xla_auto_jit=fusible", "", 1, True, True),
        # -1 overrides set_jit; 0 defers to it.
        ("--tf_xla_auto_jit=-1 --tf_xla_cpu_global_jit", "autoclustering", 0)
        + (False, False),
        ("--tf_xla_auto_jit=0 --tf_xla_cpu_global_jit", "autoclustering", 0)
        + (True, True),
    ],
)
def test_detect(flags, set_jit, gpus, requested, active):
    auto = autoclustering.detect({"TF_XLA_FLAGS": flags}, set_jit, gpus)
    assert (auto.requested, auto.active) == (requested, active)
    assert bool(auto.reason) == (requested and not active)


def test_settle_says_which_mode_wins():
    on = autoclustering.AutoClustering(True, True, "`set_jit(True)`")
    section, note, finding = autoclustering.settle(True, "asked for", on)
    assert section.mode == "jit_compile" and "jit_compile wins" in note
    assert note.startswith("asked for. Auto-clustering is asked for too")
    assert finding is None
    off = autoclustering.AutoClustering(True, False, "`set_jit`", "no flag")
    section, note, finding = autoclustering.settle(False, "off", off)
    assert note == "off"
    assert section.mode == "off" and finding[0] == "auto-clustering-inactive"
    assert "--tf_xla_cpu_global_jit" in finding[2]


def test_covered_matches_ops_through_inlined_call_prefixes():
    step = frozenset(["dense/MatMul", "dense/BiasAdd", "loss/Mean", "x/Mul"])
    clusters = {
        "StatefulPartitionedCall/dense/MatMul",
        "StatefulPartitionedCall/StatefulPartitionedCall/dense/BiasAdd",
        "loss/Mean",
        "StatefulPartitionedCall/other/Add",  # not a step op
    }
    assert autoclustering.covered(step, clusters) == 3
    assert autoclustering.covered(step, set()) == 0


def test_clusters_line_names_clusters_and_the_share():
    from keras_xla.core.render import clusters_line
    from keras_xla.core.sections import ClusteringSection

    clusters = {"train/cluster_1": 2, "train/cluster_0": 1}
    clusters["test/cluster_2"] = 1
    section = ClusteringSection(
        "auto-clustering", True, True, "set_jit", clusters=clusters,
        ops_in_clusters=30, step_ops=40,
    )  # fmt: skip
    line = clusters_line(section)
    assert "3 cluster(s) (test: cluster_2; train: cluster_0, cluster_1)" in line
    assert "in 4 compilation(s)" in line
    assert "hold 30 of its 40 TensorFlow ops (75%)" in line
    assert section.share == 0.75
    assert ClusteringSection.from_dict(section.to_dict()) == section


def run_child(tmp_path, flags, *extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_XLA_FLAGS", None)
    if flags:
        env["TF_XLA_FLAGS"] = flags
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "autoclustering_run.py")]
        + [str(tmp_path / "profile"), *extra],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_auto_clustering_counts_match_the_profiler(tmp_path):
    out = run_child(tmp_path, "--tf_xla_cpu_global_jit")
    assert out["clustering"]["mode"] == "auto-clustering"
    assert out["tuner"] == out["profiler"] > 0
    # Train and validation clusters compile for the full batch in epoch
    # 0; the short last batches compile lazily, at their second run.
    assert out["epochs"][0] > 0 and out["epochs"][1] > 0
    assert out["epochs"][2] == 0
    causes = {(f, e, c) for f, e, c, _, _ in out["recompilations"]}
    assert causes == {
        ("train", 1, "partial_batch"),
        ("test", 1, "partial_batch"),
    }
    assert [8, 16, 4] == out["recompilations"][0][3]
    clusters = out["clustering"]["clusters"]
    assert sum(clusters.values()) == out["tuner"]
    # The share of the train step under XLA: the conv model's step is
    # mostly clusterable, and the count is of the step's own ops.
    inside = out["clustering"]["ops_in_clusters"]
    assert 0.3 * out["clustering"]["step_ops"] < inside
    assert inside <= out["clustering"]["step_ops"]
    assert f"hold {inside} of its" in out["summary"]
    assert all(name.split("/")[1].startswith("cluster_") for name in clusters)
    assert "Auto-clustering is on" in out["jit"]
    # The input-wait stamps sit beside the clusters, never in one: they
    # compile nothing; and the wait for each batch is seen.
    assert out["clustered_ops"] > 0
    assert out["clustered_stamps"] == []
    assert all(ms is not None and ms >= 0.0 for ms in out["input_ms"])


def test_set_jit_alone_on_a_cpu_is_said_to_do_nothing(tmp_path):
    out = run_child(tmp_path, "")
    assert out["profiler"] == out["tuner"] == 0
    assert out["clustering"]["mode"] == "off"
    assert "auto-clustering-inactive" in out["codes"]


def test_auto_clustering_is_a_trial_candidate(tmp_path):
    # set_jit(True) with jit_compile="auto": no XLA, auto-clustering and
    # jit_compile are the candidates on the live run; every step is real
    # and the compile count equals the profiler's. The run has 40 steps of
    # about 2 ms: jit_compile's compile (tracing the step again) cannot
    # pay back in what is left, so it is never tried.
    from keras_xla.auto.policy import Drop

    out = run_child(tmp_path, "--tf_xla_cpu_global_jit", "auto")
    assert out["candidates"] == [
        "no_xla/float32",
        "autoclustering/float32",
        "xla/float32",
    ]
    assert out["status"] == "decided" and out["winner"] in out["candidates"]
    assert min(out["timed"][:2]) >= 2
    assert out["timed"][2] == 0 and out["dropped"][2] == Drop.PAYBACK
    assert out["tuner"] == out["profiler"] > 0
    assert out["iterations"] == 40
    mode = {"xla/float32": "jit_compile", "no_xla/float32": "off"}
    assert out["mode"] == mode.get(out["winner"], "auto-clustering")
    assert out["jit"] is (out["winner"] == "xla/float32")
    # The user's set_jit(True) stays unless "no XLA" won.
    expected = "" if out["winner"] == "no_xla/float32" else "autoclustering"
    assert out["set_jit"] == expected

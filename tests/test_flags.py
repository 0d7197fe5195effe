import json
import os
import subprocess
import sys

import pytest

from keras_xla.tf_backend import flag_tables
from keras_xla.tf_backend import flags as F
from keras_xla.tf_backend.flags import Flag

TINY_JIT_RUN = """
import tensorflow as tf
f = tf.function(jit_compile=True)(lambda x: x * 2.0 + 1.0)
print("RESULT", f(tf.constant([1.0, 2.0])).numpy().tolist())
"""
CHECK_RUN = """
import dataclasses, json
from keras_xla.tf_backend import flags
print(json.dumps([dataclasses.asdict(p) for p in flags.check_flags()]))
"""
# keras_xla imported first: it fixes the flag, and TensorFlow runs.
GUARDED_RUN = """
import dataclasses, json, os
import keras_xla
from keras_xla.tf_backend import flag_guard
import tensorflow as tf
f = tf.function(jit_compile=True)(lambda x: x * 2.0 + 1.0)
print("RESULT", f(tf.constant([1.0, 2.0])).numpy().tolist())
print(json.dumps({
    "fixes": [[x.problem.code, x.action] for x in flag_guard.FIXES],
    "xla_flags": os.environ.get("XLA_FLAGS"),
}))
"""


def run_python(code, **env):
    base = {k: v for k, v in os.environ.items() if k not in F.VARIABLES}
    base["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", []),
        ("--a=1 --b --noc", [("a", "1"), ("b", None), ("noc", None)]),
        ("  --a=1\t--b=x=y\n", [("a", "1"), ("b", "x=y")]),
        ('--d="/tmp/a b" --e', [("d", "/tmp/a b"), ("e", None)]),
        ('--d="say \\"hi\\"" --e=', [("d", 'say "hi"'), ("e", "")]),
        ("--d='x \\ y'", [("d", "x \\ y")]),
        ("--a=1 oops --b=2", [("a", "1")]),  # TensorFlow stops at `oops`.
        ("xla_dump_to=/tmp", []),  # A flags file name, not flags.
    ],
)
def test_parse_flags_splits_like_tensorflow(text, expected):
    flags = F.parse_flags(text)
    assert [(f.name, f.value) for f in flags] == expected
    assert F.parse_flags(F.format_flags(flags)) == flags


def test_format_flags_round_trips_and_quotes_values():
    flags = [Flag("xla_dump_to", "/tmp/a b"), Flag("x", 'q"'), Flag("y")]
    text = F.format_flags(flags)
    assert text == '--xla_dump_to="/tmp/a b" --x=q" --y'
    assert F.parse_flags(text) == flags
    assert F.format_flags(F.parse_flags(" --a=1   --b ")) == "--a=1 --b"
    assert Flag("v", "'quoted'").raw == "--v=\"'quoted'\""


@pytest.mark.parametrize(
    "text, name, value, expected",
    [
        ("", "a", "1", "--a=1"),
        ("--x=1 --y", "a", "/c", "--x=1 --y --a=/c"),
        ("--a=0 --x=1 --a=2", "a", "3", "--a=3 --x=1"),
        ("--x='q r' --a=0", "--a", None, "--x='q r' --a"),
        ("--x=1 oops", "a", "a b", '--x=1 --a="a b" oops'),
    ],
)
def test_with_flag_sets_one_flag_and_keeps_the_others(
    text, name, value, expected
):
    assert F.with_flag(text, name, value) == expected


def test_with_flag_rejects_a_flags_file_and_bad_names():
    with pytest.raises(ValueError, match="flags file"):
        F.with_flag("/etc/xla_flags", "a", "1")
    with pytest.raises(ValueError, match="'a b'"):
        F.with_flag("", "a b", "1")


def test_known_flags_come_from_the_installed_tensorflow():
    tf_xla, xla = F.known_flags("TF_XLA_FLAGS"), F.known_flags("XLA_FLAGS")
    assert {"tf_xla_persistent_cache_directory", "tf_xla_auto_jit"} <= tf_xla
    assert {"xla_dump_to", "xla_dump_hlo_as_text"} <= xla
    # Past the end of TensorFlow's cut usage text: read from the library.
    assert "xla_gpu_enable_while_loop_double_buffering" in xla
    assert "tf_xla_dump_to" not in tf_xla | xla
    assert all(n.startswith("tf_") for n in tf_xla)
    assert all(n.startswith("xla_") for n in xla)
    assert len(xla) > 200 and len(tf_xla) > 40
    with pytest.raises(ValueError, match="XLA_FLAGS"):
        F.known_flags("XLA_FLAG")


@pytest.mark.parametrize(
    "environ, code, suggestion",
    [
        (
            {"TF_XLA_FLAGS": "--tf_xla_dump_to=/tmp/x"},
            "unknown-xla-flag",
            "XLA_FLAGS=--xla_dump_to=/tmp/x",
        ),
        (
            {"XLA_FLAGS": "--xla_dump_to=/d --xla_dump_hlo_as_txt"},
            "unknown-xla-flag",
            "XLA_FLAGS=--xla_dump_hlo_as_text",
        ),
        (
            {"TF_XLA_FLAGS": "--tf_xla_persistant_cache_directory=/c"},
            "unknown-xla-flag",
            "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=/c",
        ),
        (
            {"TF_XLA_FLAGS": "--xla_dump_to=/d"},
            "xla-flag-wrong-variable",
            "XLA_FLAGS=--xla_dump_to=/d",
        ),
        (
            {"XLA_FLAGS": "--tf_xla_persistent_cache_directory=/c"},
            "xla-flag-wrong-variable",
            "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=/c",
        ),
        (
            {"XLA_FLAGS": "--noxla_dump_hlo_as_text"},
            "negated-xla-flag",
            "XLA_FLAGS=--xla_dump_hlo_as_text=false",
        ),
        (
            {"XLA_FLAGS": "--xla_dump_to"},
            "xla-flag-missing-value",
            "XLA_FLAGS=--xla_dump_to=VALUE",
        ),
        (
            {"XLA_FLAGS": "--xla_dump_hlo_as_text=yes"},
            "invalid-xla-flag-value",
            "XLA_FLAGS=--xla_dump_hlo_as_text=true",  # yes -> true
        ),
        (
            {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=four"},
            "invalid-xla-flag-value",
            None,
        ),
        (
            {"XLA_FLAGS": "-xla_dump_to=/d"},
            "unknown-xla-flag",
            "XLA_FLAGS=--xla_dump_to=/d",
        ),
        (
            {"XLA_FLAGS": "--xla-dump-to=/d"},
            "unknown-xla-flag",
            "XLA_FLAGS=--xla_dump_to=/d",
        ),
        (
            {"XLA_FLAGS": "xla_dump_to=/d"},
            "missing-xla-flags-file",
            "XLA_FLAGS=--xla_dump_to=/d",
        ),
    ],
)
def test_check_flags_names_the_problem_and_the_intended_flag(
    environ, code, suggestion
):
    [problem] = F.check_flags(environ)
    assert (problem.code, problem.suggestion) == (code, suggestion)
    assert problem.variable in environ
    assert problem.flag in environ[problem.variable]
    assert problem.flag in problem.message
    if suggestion:
        assert f"Did you mean `{suggestion}`?" in problem.message


def test_check_flags_reports_text_tensorflow_ignores():
    environ = {"XLA_FLAGS": "--xla_dump_hlo_as_text --xla_dump_to /d --a"}
    problems = F.check_flags(environ)
    assert [p.code for p in problems] == [
        "xla-flag-missing-value",
        "ignored-xla-flag-text",
    ]
    assert problems[1].flag == "/d --a"
    assert problems[1].suggestion == "XLA_FLAGS=--xla_dump_to=/d"


def test_check_flags_accepts_valid_flags_and_flags_files(tmp_path):
    flags_file = tmp_path / "xla_flags"
    flags_file.write_text("--xla_dump_to=/d\n--xla_dump_hlo_as_text\n")
    good = {
        "TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_min_cluster_size=4",
        "XLA_FLAGS": '--xla_dump_to="/a b" --xla_backend_optimization_level=2',
    }
    assert F.check_flags(good) == []
    assert F.check_flags({"XLA_FLAGS": str(flags_file)}) == []
    assert F.check_flags({}) == []
    assert F.validate_flags(good) is None
    flags_file.write_text("--xla_dump_too=/d")
    [problem] = F.check_flags({"XLA_FLAGS": str(flags_file)})
    assert problem.suggestion == "XLA_FLAGS=--xla_dump_to=/d"


def test_validate_flags_raises_naming_variable_flag_and_fix():
    with pytest.raises(ValueError) as error:
        F.validate_flags({"TF_XLA_FLAGS": "--tf_xla_dump_to=/tmp/x"})
    message = str(error.value)
    assert "TF_XLA_FLAGS" in message and "`--tf_xla_dump_to=/tmp/x`" in message
    assert "Did you mean `XLA_FLAGS=--xla_dump_to=/tmp/x`?" in message


def test_check_flags_never_raises(monkeypatch, caplog):
    def broken():
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(flag_tables, "tables", broken)
    assert F.check_flags({"XLA_FLAGS": "--xla_dump_to=/d"}) == []
    assert "probe exploded" in caplog.text


def test_curated_fallback_reports_only_certain_problems(monkeypatch):
    child = run_python("print('no tensorflow here')")
    table = flag_tables.read_probe("XLA_FLAGS", child)
    assert table.complete is False and "xla_dump_to" in table.types
    tables = {v: flag_tables.read_probe(v, run_python("")) for v in F.VARIABLES}
    monkeypatch.setattr(flag_tables, "tables", lambda: tables)
    environ = {
        "TF_XLA_FLAGS": "--tf_xla_dump_to=/x --tf_xla_other=1",
        "XLA_FLAGS": "--xla_unlisted_flag=1 --tf_xla_auto_jit=2",
    }
    assert [(p.code, p.suggestion) for p in F.check_flags(environ)] == [
        ("unknown-xla-flag", "XLA_FLAGS=--xla_dump_to=/x"),
        ("xla-flag-wrong-variable", "TF_XLA_FLAGS=--tf_xla_auto_jit=2"),
    ]


def test_hlo_dump_env_keeps_flags_and_drops_the_fake_one():
    environ = {
        "TF_XLA_FLAGS": "--tf_xla_dump_to=/x --tf_xla_auto_jit=2",
        "XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_dump_to=/old",
    }
    update = F.hlo_dump_env("/tmp/hlo dir", environ)
    assert update == {
        "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
        "XLA_FLAGS": '--xla_cpu_enable_fast_math=false --xla_dump_to="/tmp/'
        'hlo dir" --xla_dump_hlo_as_text=true',
    }
    assert F.check_flags({**environ, **update}) == []
    assert F.hlo_dump_env("/d", {}) == {
        "XLA_FLAGS": "--xla_dump_to=/d --xla_dump_hlo_as_text=true"
    }


def test_fake_dump_flag_kills_tensorflow_but_not_check_flags(tmp_path):
    bad = {"TF_XLA_FLAGS": "--tf_xla_dump_to=/tmp/x"}
    dump_dir = tmp_path / "hlo"
    runs = {
        "dies": run_python(TINY_JIT_RUN, **bad),
        "checks": run_python(CHECK_RUN, KERAS_XLA_FIX_FLAGS="0", **bad),
        "guarded": run_python(GUARDED_RUN, **bad),
        "dumps": run_python(TINY_JIT_RUN, **F.hlo_dump_env(str(dump_dir))),
    }
    out = {name: child.communicate(timeout=120) for name, child in runs.items()}
    # (a) TensorFlow aborts on the flag at its first op.
    assert runs["dies"].returncode != 0
    assert "RESULT" not in out["dies"][0]
    assert (
        "Unknown flag in TF_XLA_FLAGS: --tf_xla_dump_to=/tmp/x"
        in (out["dies"][1])
    )
    # (b) check_flags() finds it, in the same environment, and lives.
    assert runs["checks"].returncode == 0, out["checks"][1][-2000:]
    [problem] = json.loads(out["checks"][0].strip().splitlines()[-1])
    assert problem["code"] == "unknown-xla-flag"
    assert problem["suggestion"] == "XLA_FLAGS=--xla_dump_to=/tmp/x"
    # (c) Imported first, keras_xla applies the intended flag at import,
    # and says so; TensorFlow runs.
    assert runs["guarded"].returncode == 0, out["guarded"][1][-2000:]
    assert "RESULT [3.0, 5.0]" in out["guarded"][0]
    guarded = json.loads(out["guarded"][0].strip().splitlines()[-1])
    assert guarded["fixes"] == [
        [
            "unknown-xla-flag",
            "replaced `--tf_xla_dump_to=/tmp/x` by "
            "`XLA_FLAGS=--xla_dump_to=/tmp/x`",
        ]
    ]
    assert guarded["xla_flags"] == "--xla_dump_to=/tmp/x"
    # The right way: XLA_FLAGS=--xla_dump_to=DIR writes HLO text.
    assert runs["dumps"].returncode == 0, out["dumps"][1][-2000:]
    assert "RESULT [3.0, 5.0]" in out["dumps"][0]
    texts = [p.read_text() for p in dump_dir.glob("*.txt")]
    assert any(text.startswith("HloModule") for text in texts)


@pytest.mark.parametrize(
    "value, suggestion",
    [
        ("--tf_xla_auto_jit = 2", "TF_XLA_FLAGS=--tf_xla_auto_jit=2"),
        ("--tf_xla_auto_jit =2", "TF_XLA_FLAGS=--tf_xla_auto_jit=2"),
        ("--tf_xla_auto_jit= 2", "TF_XLA_FLAGS=--tf_xla_auto_jit=2"),
        ("--tf_xla_auto_jit=2 extra", None),
    ],
)
def test_spaces_around_equals_suggest_the_joined_flag(value, suggestion):
    problems = F.check_flags({"TF_XLA_FLAGS": value})
    ignored = [p for p in problems if p.code == "ignored-xla-flag-text"]
    assert len(ignored) == 1
    assert ignored[0].suggestion == suggestion


def test_doctor_keeps_flags_with_only_ignored_text(monkeypatch):
    from keras_xla.tf_backend import doctor

    class Seen(Exception):
        pass

    def runtime(skip_compile):
        raise Seen(skip_compile, os.environ.get("TF_XLA_FLAGS"))

    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 extra")
    monkeypatch.setattr(doctor, "_runtime", runtime)
    # The variables as this test sets them (the ledger owns this
    # process's own TF_XLA_FLAGS).
    monkeypatch.setattr(
        doctor.compile_ledger,
        "user_environment",
        lambda environ=None: {v: os.environ.get(v) for v in F.VARIABLES},
    )
    with pytest.raises(Seen) as seen:
        doctor.collect_diagnosis()
    # Harmless trailing text: the variable stays and the compile runs.
    skip, during = seen.value.args
    assert skip is False and "--tf_xla_auto_jit=2 extra" in during
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 --nope")
    with pytest.raises(Seen) as seen:
        doctor.collect_diagnosis()
    assert seen.value.args == (True, None)  # unset: it would abort


@pytest.mark.parametrize(
    "value, bad, suggestion",
    [
        # Measured: TensorFlow aborts its first op on `=fast`, not on
        # `=3` or `=single-gpu(2)`.
        ("--tf_xla_auto_jit=fast", True, None),
        ("--tf_xla_auto_jit=3", False, None),
        ("--tf_xla_auto_jit=single-gpu(2)", False, None),
        ("--tf_xla_auto_jit=fusible", False, None),
        ("--tf_xla_cpu_global_jit=yes", True, "--tf_xla_cpu_global_jit=true"),
        ("--tf_xla_cpu_global_jit=off", True, "--tf_xla_cpu_global_jit=false"),
    ],
)
def test_flag_values_are_checked(value, bad, suggestion):
    problems = F.check_flags({"TF_XLA_FLAGS": value})
    assert [p.code for p in problems] == (
        ["invalid-xla-flag-value"] if bad else []
    )
    if suggestion:
        assert problems[0].suggestion == f"TF_XLA_FLAGS={suggestion}"
    if bad and "auto_jit" in value:
        assert "single-gpu(N) or fusible" in problems[0].message


@pytest.fixture
def guard_state(monkeypatch):
    from keras_xla.tf_backend import flag_guard

    monkeypatch.setattr(flag_guard, "FIXES", [])
    monkeypatch.setattr(flag_guard, "_ORIGINAL", {})
    return flag_guard


@pytest.mark.parametrize(
    "environ, after, action",
    [
        (
            {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_dump_to=/d"},
            {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
            | {"XLA_FLAGS": "--xla_dump_to=/d"},
            "replaced `--tf_xla_dump_to=/d` by `XLA_FLAGS=--xla_dump_to=/d`",
        ),
        (
            {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit=yes"},
            {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit=true"},
            "replaced `--tf_xla_cpu_global_jit=yes` by "
            "`TF_XLA_FLAGS=--tf_xla_cpu_global_jit=true`",
        ),
        (
            {"TF_XLA_FLAGS": "--tf_xla_auto_jit=fast --tf_xla_cpu_global_jit"},
            {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit"},
            "dropped `--tf_xla_auto_jit=fast` from TF_XLA_FLAGS",
        ),
        (
            {"XLA_FLAGS": "--xla_dump_to"},  # needs =VALUE: not sure what
            {},
            "dropped `--xla_dump_to` from XLA_FLAGS",
        ),
        (
            {"XLA_FLAGS": "xla_dump_to=/d"},  # read as a flags file
            {"XLA_FLAGS": "--xla_dump_to=/d"},
            "set `XLA_FLAGS=--xla_dump_to=/d`",
        ),
    ],
)  # fmt: skip
def test_import_guard_fixes_what_would_abort(
    guard_state, environ, after, action
):
    before = dict(environ)
    fixes = guard_state.guard(environ)
    assert [f.action for f in fixes] == [action]
    assert environ == after
    assert F.check_flags(environ) == []  # nothing left to abort on
    assert guard_state.FIXES == fixes
    assert guard_state.original({}) == {
        fixes[0].problem.variable: before[fixes[0].problem.variable]
    }
    code, message, fix, place = fixes[0].finding()
    assert code == fixes[0].problem.code
    assert f"At import, keras_xla {action} for this process" in message
    assert "strict" not in message and place[0] in before
    assert action in guard_state.strict_error()


def test_import_guard_leaves_what_does_not_abort(guard_state):
    harmless = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 extra"}
    assert guard_state.guard(harmless) == []
    assert harmless == {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 extra"}
    off = {"TF_XLA_FLAGS": "--nope", "KERAS_XLA_FIX_FLAGS": "0"}
    assert guard_state.guard(off) == [] and off["TF_XLA_FLAGS"] == "--nope"
    started = {"TF_XLA_FLAGS": "--nope"}
    assert guard_state.guard(started, tensorflow_started=True) == []
    assert guard_state.strict_error() is None


def test_tuner_reports_import_fixes_and_strict_raises(guard_state):
    import keras_xla

    environ = {"TF_XLA_FLAGS": "--tf_xla_dump_to=/d"}
    guard_state.guard(environ)
    with pytest.raises(ValueError, match="tf_xla_dump_to=/d.*replaced"):
        keras_xla.XLATuner(strict=True)
    from conftest import conv_model, regression_data

    x, y = regression_data(16)
    tuner = keras_xla.XLATuner(verbose=0, analyze_hlo=False, baseline=False)
    conv_model().fit(x, y, batch_size=16, verbose=0, callbacks=[tuner])
    (finding,) = [
        f for f in tuner.report.findings if f.code == "unknown-xla-flag"
    ]
    assert "At import, keras_xla replaced `--tf_xla_dump_to=/d`" in (
        finding.message
    )
    assert finding.fix == (
        "Correct TF_XLA_FLAGS where it is set: XLA_FLAGS=--xla_dump_to=/d."
    )


def test_well_known_flags_have_the_installed_tensorflows_types():
    tables = flag_tables.tables()
    for variable, types in flag_tables.WELL_KNOWN.items():
        assert tables[variable].complete
        assert {n: tables[variable].types.get(n, "absent") for n in types} == (
            types
        )


QUICK_CASES = [
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"},
    {"XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_dump_to=/d"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=yes"},
    {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit=on --tf_xla_min_cluster_size"},
    {"XLA_FLAGS": "--xla_force_host_platform_device_count=two"},
    {"XLA_FLAGS": "--xla_dump_hlo_as_text=yes --xla_dump_to /d"},
    {"XLA_FLAGS": "xla_dump_to=/d"},
]


@pytest.mark.parametrize("environ", QUICK_CASES)
def test_a_quick_check_of_well_known_flags_asks_no_probe(environ, monkeypatch):
    full = F.check_flags(environ)

    def no_probe():
        raise AssertionError("probed")

    monkeypatch.setattr(flag_tables, "tables", no_probe)
    quick = F.check_flags(environ, quick=True)
    assert quick == full  # The same problems, messages and fixes.
    if "yes" in str(environ) or "two" in str(environ):
        assert "invalid-xla-flag-value" in [p.code for p in quick]


@pytest.mark.parametrize(
    "environ",
    [
        {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_dump_to=/d"},
        {"TF_XLA_FLAGS": "--tf_xla_clustering_fuel=3"},  # not well-known
        {"XLA_FLAGS": "-xla_dump_to=/d"},  # one dash: a likely fix
        {"XLA_FLAGS": "--noxla_dump_hlo_as_text"},
        {"XLA_FLAGS": "--tf_xla_auto_jit=2"},  # the other variable's
    ],
)
def test_a_quick_check_asks_tensorflow_for_any_other_flag(environ, monkeypatch):
    full = F.check_flags(environ)
    asked = []
    tables = flag_tables.tables()
    monkeypatch.setattr(
        flag_tables, "tables", lambda: asked.append(1) or tables
    )
    assert F.check_flags(environ, quick=True) == full
    assert asked == [1]

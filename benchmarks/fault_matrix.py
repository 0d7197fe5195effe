"""Faults the tuner must survive, each in its own process.

For each fault (a damaged compile cache, bad XLA flags, a log dir that
cannot be written, two tuners, an interrupted profile window, an empty
dataset, more dynamic dimensions than the probe holds, an unwritable
temporary directory, a cache directory or entries another user could
have written, links planted at the names keras_xla reads and writes, a
full disk under the cache, a callback after the tuner that fails, plain
calls after a tuned fit), a child process
(`fault_child.py`) trains a small Conv1D model with XLATuner and reports
the steps trained against the steps expected, whether the report is
valid (its JSON round trip, and the file where it could be written), the
findings, whether a file of the user's outside keras_xla's directories
is unchanged, and the tuner's compile count against the TF profiler's.
The table says per fault whether nothing was lost.

Run: python benchmarks/fault_matrix.py
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from keras_xla.core.render import format_table  # noqa: E402

# fault: (environment, the finding that must be present or None)
FAULTS = {
    "cache-random-bytes": ({}, "compile-cache-corrupt"),
    "cache-truncated": ({}, "compile-cache-corrupt"),
    "cache-empty": ({}, "compile-cache-corrupt"),
    "cache-usual-order": ({}, None),
    "cache-uncreatable": ({}, "compile-cache-inactive"),
    "flag-tf_xla_dump_to": (
        {"TF_XLA_FLAGS": "--tf_xla_dump_to={work}/hlo"},
        "unknown-xla-flag",
    ),
    "flag-auto_jit-value": (
        {"TF_XLA_FLAGS": "--tf_xla_auto_jit=fast"},
        "invalid-xla-flag-value",
    ),
    "flag-unknown-xla": (
        {"XLA_FLAGS": "--xla_no_such_flag=1"},
        "unknown-xla-flag",
    ),
    "log-dir-train-is-a-file": ({}, "output-failed"),
    "log-dir-uncreatable": ({}, "output-failed"),
    "two-tuners": ({}, "duplicate-tuner"),
    "interrupt-in-profile-window": ({}, None),
    "empty-dataset": ({}, "no-steps"),
    "many-dynamic-dims": ({}, "folded-dimensions"),
    "tmp-unwritable": ({"TMPDIR": "{work}/blocker/tmp"}, None),
    "flags-unclosed-quote": (
        {"TF_XLA_FLAGS": '--tf_xla_auto_jit="2'},
        "compile-ledger-off",
    ),
    "child-inherits-flags": (
        {"TF_XLA_FLAGS": "--tf_xla_enable_lazy_compilation=true"},
        None,
    ),
    "cache-shared-1777": ({}, "compile-cache-untrusted"),
    "cache-planted-entry": ({}, "compile-cache-untrusted"),
    "cache-symlink-entry": ({}, "compile-cache-corrupt"),
    "cache-full-disk": ({}, "compile-cache-not-saved"),
    "log-dir-symlinks": ({}, None),
    "callback-fails-at-epoch-end": ({}, None),
    "plain-fit-after-tuned": ({}, None),
}
# Faults that start from a copy of a healthy cache.
SEEDED = (
    "cache-random-bytes",
    "cache-truncated",
    "cache-empty",
    "cache-planted-entry",
)


def child(fault, work, env_extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_XLA_FLAGS", "XLA_FLAGS")
    }
    env.update({k: v.format(work=work) for k, v in env_extra.items()})
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "fault_child.py"), fault, work],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if out.returncode != 0:
        return {"died": out.returncode, "stderr": out.stderr[-300:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def damage(cache, how):
    entries = sorted(
        f for f in os.listdir(cache) if f.startswith("xla_compile_cache__")
    )
    for name in entries:
        path = os.path.join(cache, name)
        data = open(path, "rb").read()
        blob = {
            "cache-random-bytes": os.urandom(len(data)),
            "cache-truncated": data[: len(data) // 3],
            "cache-empty": b"",
        }[how]
        with open(path, "wb") as f:
            f.write(blob)


def main():
    root = tempfile.mkdtemp(prefix="keras_xla_faults_")
    seed = os.path.join(root, "seed")
    os.makedirs(seed)
    child("cache-seed", seed, {})  # a healthy cache to damage
    rows = [
        (
            "fault",
            "trained",
            "report valid",
            "finding",
            "outside",
            "compiles",
            "nothing lost",
        )
    ]
    results = {}
    for fault, (env, code) in FAULTS.items():
        work = os.path.join(root, fault)
        os.makedirs(work)
        if fault == "tmp-unwritable":
            open(os.path.join(work, "blocker"), "w").close()
        if fault in SEEDED:
            shutil.copytree(
                os.path.join(seed, "cache"), os.path.join(work, "cache")
            )
        if fault in ("cache-random-bytes", "cache-truncated", "cache-empty"):
            damage(os.path.join(work, "cache"), fault)
        if fault == "cache-usual-order":
            child(fault, work, env)  # the first run fills the cache
        out = child(fault, work, env)
        results[fault] = out
        if "died" in out:
            rows.append((fault, "process died", "-", "-", "-", "-", "NO"))
            continue
        codes = out.get("second_codes", out["codes"])
        found = code is None or code in codes
        extra_ok = {
            "cache-usual-order": out.get("cache_hits", 0) > 0,
            "interrupt-in-profile-window": out.get(
                "own_profiler_starts", False
            ),
            "cache-planted-entry": out.get("cache_hits") == 0,
            "child-inherits-flags": out.get("child_flags_users", False),
            "callback-fails-at-epoch-end": out.get("epochs_once", False),
            "plain-fit-after-tuned": out.get("jit_restored", False)
            and out.get("plain_xla_compiles") == 0,
        }.get(fault, True) and out["outside_untouched"]
        tuner, truth = out["compilations"]
        ok = (
            out["trained"] == out["expected"]
            and out["report_valid"]
            and found
            and extra_ok
            and tuner == truth
        )
        rows.append(
            (
                fault,
                f"{out['trained']}/{out['expected']} steps",
                "yes" if out["report_valid"] else "NO",
                code
                or {
                    "cache-usual-order": "cache hits",
                    "interrupt-in-profile-window": "profiler freed",
                    "child-inherits-flags": "user's flags",
                    "callback-fails-at-epoch-end": "epoch once",
                    "plain-fit-after-tuned": "model as compiled",
                }.get(fault, "-"),
                "untouched" if out["outside_untouched"] else "CHANGED",
                f"{tuner}/{truth}",
                "yes" if ok else "NO",
            )
        )
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; compiles: tuner/profiler"
    )
    print("\n".join(format_table(rows)))
    lost = [r[0] for r in rows[1:] if r[-1] != "yes"]
    survived = len(rows) - 1 - len(lost)
    print(
        f"{survived} of {len(rows) - 1} faults survived with nothing lost"
        + (f"; not: {', '.join(lost)}" if lost else "")
    )
    shutil.rmtree(root, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()

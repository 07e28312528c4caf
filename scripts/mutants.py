"""`make mutants`: mutation testing of the rules the course and the stack enforce.

mutmut (configured in pyproject.toml's [tool.mutmut]) copies helpers/ and local_stack/ into
mutants/, plants one defect at a time in the functions named here, and runs the fast tests
that reach each one. A mutant that no test fails "survives": tests/README.md records the
last run, and why each survivor is equivalent to the original code.

    python scripts/mutants.py                 # every file below, then the table
    python scripts/mutants.py helpers/runlog.py  # one file (or several)
    python scripts/mutants.py --report        # the table of the last run only
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS_DIR = ROOT / "mutants"
WORKERS = 2  # the machine's two cores

# The functions to mutate, by file: "name" for a function, "Class.method" for a method.
# mutmut does not mutate decorated functions, nor code at module level.
TARGETS: dict[str, tuple[str, ...]] = {
    # The trainer's losses, their config and datum checks, and the optimizer step.
    "local_stack/engine/trainer.py": (
        "cross_entropy_loss",
        "importance_sampling_loss",
        "ppo_loss",
        "cispo_loss",
        "LossFn.__call__",
        "loss_config",
        "check_datum",
        "adamw_step",
        "LoraTrainer.optim_step",
        "_all_finite",
    ),
    # The sampler: the distribution a token is drawn from, and the draw.
    "local_stack/engine/sampler.py": ("sampling_logprobs", "_choose", "sample_batch"),
    # The grader rule (notebook 01).
    "helpers/scoring.py": (
        "extract_boxed",
        "final_answer",
        "normalize_answer",
        "answer_matches",
        "graded_text",
        "MathEnv.step",
        "MathEnv.scored",
    ),
    # Advantages, datums, the step's metrics and the held-out intervals (notebook 04).
    "helpers/training.py": (
        "mean_reward",
        "metric_rate",
        "split_degenerate_groups",
        "train_step_metrics",
        "train_on_groups",
        "problem_counts",
        "scores",
        "bootstrap_interval",
        "compare",
        "pass_at_k",
        "pass_at_k_curve",
    ),
    # The run log's resume checks.
    "helpers/runlog.py": (
        "RunLog.state",
        "RunLog.records",
        "RunLog.resume",
        "RunLog.commit",
        "_settings_differ",
        "_write_atomically",
    ),
    # The pipeline's staleness bound and what a pipelined step records (notebook 07).
    "helpers/pipelined.py": (
        "predicted_seconds_per_step",
        "train_on_batch",
        "off_policy_metrics",
        "run_loop",
    ),
    # Ownership: another client's session, model, future, checkpoint, file or LoRA.
    "local_stack/tinker/state.py": (
        "TinkerState.heartbeat",
        "TinkerState.finish_session",
        "TinkerState._session",
        "TinkerState.model",
        "TinkerState.result",
        "TinkerState.set_ttl",
        "TinkerState.delete",
        "TinkerState._check_may_change",
    ),
    "local_stack/sail/files.py": ("FileStore.get", "FileStore.delete", "FileStore.listing"),
    "local_stack/sail/loras.py": (
        "LoraRegistry.get",
        "LoraRegistry.delete",
        "LoraRegistry.listing",
    ),
}


def mutant_pattern(path: str, function: str) -> str:
    """mutmut's name for `function`'s mutants: `module.x_name__mutmut_N`, or
    `module.xǁClassǁmethod__mutmut_N` for a method."""
    module = path.removesuffix(".py").replace("/", ".")
    cls, _, name = function.rpartition(".")
    return f"{module}.{f'xǁ{cls}ǁ{name}' if cls else f'x_{name}'}__mutmut_*"


STATUS = {1: "killed", 3: "killed", 0: "survived", 36: "timeout", 255: "timeout"}


def results(paths: list[str]) -> dict[str, Counter]:
    """Per file, how many of the targeted mutants were killed, survived, or else."""
    table = {}
    for path in paths:
        meta = MUTANTS_DIR / f"{path}.meta"
        codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
        patterns = [mutant_pattern(path, f) for f in TARGETS[path]]
        counts: Counter = Counter()
        for name, code in codes.items():
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                counts[STATUS.get(code, "not checked" if code is None else f"exit {code}")] += 1
        table[path] = counts
    return table


def survivors(paths: list[str]) -> list[str]:
    names = []
    for path in paths:
        meta = MUTANTS_DIR / f"{path}.meta"
        if meta.exists():
            patterns = [mutant_pattern(path, f) for f in TARGETS[path]]
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            names += [
                n
                for n, c in codes.items()
                if c == 0 and any(fnmatch.fnmatchcase(n, p) for p in patterns)
            ]
    return sorted(names)


def print_table(paths: list[str]) -> None:
    table = results(paths)
    print(f"{'file':40} {'mutants':>8} {'killed':>7} {'survived':>9} {'other':>6}")
    total: Counter = Counter()
    for path, counts in table.items():
        total += counts
        n = sum(counts.values())
        other = n - counts["killed"] - counts["survived"]
        print(f"{path:40} {n:8} {counts['killed']:7} {counts['survived']:9} {other:6}")
    n = sum(total.values())
    print(f"{'all':40} {n:8} {total['killed']:7} {total['survived']:9}")
    for status in sorted(set(total) - {"killed", "survived"}):
        print(f"  {status}: {total[status]}")
    for name in survivors(paths):
        print(f"  survived: {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="files of TARGETS to mutate (default: all)")
    parser.add_argument("--report", action="store_true", help="only print the last run's table")
    args = parser.parse_args()
    paths = args.files or list(TARGETS)
    unknown = sorted(set(paths) - set(TARGETS))
    if unknown:
        parser.error(f"not a file of TARGETS: {unknown}; choose from {list(TARGETS)}")
    if not args.report:
        shutil.rmtree(MUTANTS_DIR, ignore_errors=True)  # a fresh run: nothing cached
        patterns = [mutant_pattern(p, f) for p in paths for f in TARGETS[p]]
        mutmut = Path(sys.executable).parent / "mutmut"
        run = subprocess.run([mutmut, "run", "--max-children", str(WORKERS), *patterns], cwd=ROOT)
        if run.returncode:
            return run.returncode
    print_table(paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())

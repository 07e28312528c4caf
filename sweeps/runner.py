"""Run the training-loop notebook once per combination of a grid of parameters: `make sweep`.

    make sweep                                      # the grid in sweeps/default.toml
    make sweep SWEEP="-p seed 0 1 2"                # ... with three seeds instead of two
    make sweep SWEEP="--grid my.toml --name groups -p group_size 4 8"
    make sweep SWEEP="--dry-run"                    # check the grid, print the plan, run nothing
    make sweep SWEEP="--profile rehearsal"          # ... at another of notebook 04's sizes
    .venv/bin/python -m sweeps.runner -p seed 0 1   # the same without make, from the repo root

A grid file (TOML) has a `name`, a size `profile` of notebook 04 (declared with its
parameters, `helpers.notebook_parameters`; `--profile` names another) and a `[parameters]`
table on top of it; `-p NAME VALUE...` adds to that table or replaces its entry. One value
holds in every run, several give one run per value, and runs are every combination. Each run
is notebooks/04_training_loop.ipynb under papermill, then notebooks/05_did_it_learn.ipynb
(the held-out evaluation that notebook 06 compares; pass@k left out), named
`<name>-<parameter><value>-...` after the parameters that vary, in its own folder under runs/
(COURSE_RUNS_DIR), where its executed notebooks are kept beside its metrics and state.

Before the first run starts, every run's parameters go through the check the notebook
itself runs first (`helpers.notebook_parameters.resolve`), so a bad value stops the sweep
at once, in one sentence. A run that fails is reported and the others go on. Running the
same sweep again skips the runs that finished (all steps done, evaluated after the last)
and resumes the others where they stopped. With `backend` "cloud", what the sweep may
spend is printed before it starts: rollouts, and the most tokens they can sample, against a
sweep-wide budget (`--budget-sampled-tokens`) it refuses to pass. A grid of more than
`MAX_RUNS` runs is refused, and so is a run folder that another sweep or a notebook wrote.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import itertools
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import time
import tomllib
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

from budget.cost import OverBudgetError
from helpers.errors import CourseConfigError
from helpers.notebook_parameters import DEFAULT_BUDGET_SAMPLED_TOKENS, profile, resolve
from helpers.params import HELD_OUT_PROBLEMS
from helpers.runlog import RUNS_DIR
from sweeps.notebook_runs import ROOT, execute, local_stack_for
from sweeps.runs import notebook_defaults, read_run

NOTEBOOK = ROOT / "notebooks" / "04_training_loop.ipynb"
# Scores each run on its held-out problems, before and after, into its state.json; a sweep
# compares held-out gains only, so it skips pass@k (0 problems), the notebook's slowest part.
EVALUATION = ROOT / "notebooks" / "05_did_it_learn.ipynb"
EVALUATION_PARAMETERS = {"pass_at_k_problems": 0}
DEFAULT_GRID = ROOT / "sweeps" / "default.toml"
COMPARE_NOTEBOOK = "notebooks/06_compare_runs.ipynb"
# How many runs at once, unless --jobs says otherwise. The local stack computes on one
# thread, so a second run mostly queues behind the first: measured on two busy cores, two
# runs at once made each step 1.4-1.6x slower and the pair finished ~1.35x sooner than in
# turn (only the kernels' start-up overlaps). In the cloud the services compute and a run
# here mostly waits; each kernel holds about 0.4 GB (docs/local-stack.md, "Memory").
AUTO_JOBS = {"local": 1, "cloud": 4}
MAX_JOBS = 16
# A grid multiplies quickly (four parameters of four values are 256 runs): past this many
# runs, a sweep is most likely a mistyped grid.
MAX_RUNS = 64
SWEEP_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}"  # run names add "-<parameter><value>..."
# What a cloud sweep may sample in all, unless --budget-sampled-tokens says otherwise: ten
# times one notebook run's default budget. The default grid's six runs fit (3.6 million).
DEFAULT_SWEEP_BUDGET_SAMPLED_TOKENS = 10 * DEFAULT_BUDGET_SAMPLED_TOKENS
OWNER_FILE = "sweep.json"  # in each run folder a sweep started: {"sweep": its name}
PROGRESS_EVERY_S = 10.0
POLL_S = 0.5
STOP_GRACE_S = 30.0
INTERRUPTED = 130  # the exit code of a process that Ctrl-C stopped


@dataclass(frozen=True)
class PlannedRun:
    name: str
    given: dict  # what papermill injects: the grid's values and the run name
    parameters: dict  # every parameter of the notebook for this run, defaults included
    sweep: str  # the name of the sweep it belongs to

    @property
    def steps(self) -> int:
        return self.sizes["steps"]

    @property
    def sizes(self) -> dict:
        """Every parameter of the run, each None replaced by its backend's default."""
        return dataclasses.asdict(resolve(NOTEBOOK.stem, **self.parameters))


def plan(grid: dict, name: str) -> list[PlannedRun]:
    """One run per combination of the grid's list values; only the grid's shape and the
    sweep's name are checked yet."""
    if not re.fullmatch(SWEEP_NAME, name):
        raise CourseConfigError(
            f"the sweep's name must be 1-48 letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit (it starts every run's folder name), not {name!r}."
        )
    defaults = notebook_defaults(json.loads(NOTEBOOK.read_text()))
    for parameter, values in grid.items():
        if parameter == "run_name":
            raise CourseConfigError("run_name is set by the sweep for each run; use --name.")
        if parameter not in defaults:
            raise CourseConfigError(
                f"{parameter} is not a parameter of {NOTEBOOK.name}, whose parameters are "
                f"{', '.join(defaults)}."
            )
        if values == []:
            raise CourseConfigError(f"{parameter} is given no values.")
    axes = {p: v for p, v in grid.items() if isinstance(v, list)}
    fixed = {p: v for p, v in grid.items() if not isinstance(v, list)}
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_RUNS:
        raise CourseConfigError(
            f"the grid gives {size:,} runs; a sweep runs at most {MAX_RUNS} (fewer values, "
            "or several sweeps)."
        )
    runs = []
    for combination in itertools.product(*axes.values()):
        varying = dict(zip(axes, combination, strict=True))
        run_name = "-".join([name, *(f"{p}{_short(v)}" for p, v in varying.items())])
        given = {**fixed, **varying, "run_name": run_name}
        runs.append(PlannedRun(run_name, given, {**defaults, **given}, name))
    names = [run.name for run in runs]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise CourseConfigError(f"two runs of the grid would both be named {twice!r}.")
    return runs


def check(runs: list[PlannedRun]) -> None:
    """Every run's parameters through the notebook's own check, and its folder free or the
    same sweep's: the first bad one raises."""
    for run in runs:
        resolve(NOTEBOOK.stem, **run.parameters)
        folder = RUNS_DIR / run.name
        if folder.exists() and _owner(folder) != run.sweep:
            raise CourseConfigError(
                f"{_shown(folder)} already holds a run that sweep {run.sweep!r} did not start "
                "(a notebook's, or another sweep's), which this sweep would extend and "
                "overwrite; pick another --name."
            )


def _owner(folder: Path) -> str | None:
    """The name of the sweep that started the run in `folder`, if one did."""
    try:
        return json.loads((folder / OWNER_FILE).read_text())["sweep"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_cloud_budget(runs: list[PlannedRun], budget_sampled_tokens: int) -> str:
    """The sweep-wide budget line; OverBudgetError if the sweep may sample more."""
    total = sum(_tokens_left(run) for run in runs)
    if total > budget_sampled_tokens:
        raise OverBudgetError(
            f"this cloud sweep may sample {total:,} tokens, more than its sweep-wide budget "
            f"of {budget_sampled_tokens:,}; raise --budget-sampled-tokens or shrink the grid."
        )
    return (
        f"sweep-wide budget: at most {budget_sampled_tokens:,} sampled tokens "
        f"(--budget-sampled-tokens); this sweep may sample {total:,}"
    )


def cloud_budget(runs: list[PlannedRun]) -> list[str]:
    """Lines to print before a cloud sweep starts: what each run still has to sample."""
    lines, total_rollouts, total_tokens = [], 0, 0
    for run in runs:
        if read_run(RUNS_DIR / run.name).is_finished(run.steps):
            lines.append(f"  {run.name}: finished, not run again")
            continue
        steps_left, rollouts = _left(run)
        tokens = _tokens_left(run)
        total_rollouts, total_tokens = total_rollouts + rollouts, total_tokens + tokens
        lines.append(
            f"  {run.name}: {steps_left} steps, {rollouts:,} rollouts, "
            f"at most {tokens:,} sampled tokens"
        )
    lines.append(
        f"  whole sweep: {total_rollouts:,} Sail rollouts, at most {total_tokens:,} sampled "
        "tokens, and Tinker's training on the training rollouts"
    )
    return ["cloud budget, what this sweep may still sample:", *lines]


def _left(run: PlannedRun) -> tuple[int, int]:
    """(steps, rollouts) the run still has to do; none once it finished."""
    p, found = {**run.parameters, **run.sizes}, read_run(RUNS_DIR / run.name)
    if found.is_finished(run.steps):
        return 0, 0
    state = found.state
    steps_left = max(run.steps - state.get("completed_steps", 0), 0)
    evaluations = 1 + ("eval_before" not in state)  # after training, and before if not yet
    eval_problems = min(p["eval_problems"], HELD_OUT_PROBLEMS["cloud"])
    rollouts = (
        steps_left * p["group_size"] * p["groups_per_step"]
        + evaluations * eval_problems * p["eval_samples"]
    )
    return steps_left, rollouts


def _tokens_left(run: PlannedRun) -> int:
    return _left(run)[1] * run.sizes["max_tokens"]


class Sweep:
    """Runs the planned runs, `jobs` at a time, each in a process of its own."""

    def __init__(self, runs: list[PlannedRun], jobs: int) -> None:
        self.runs, self.jobs = runs, jobs
        self.waiting = [r for r in runs if not read_run(RUNS_DIR / r.name).is_finished(r.steps)]
        self.running: dict[str, tuple[PlannedRun, BaseProcess, float]] = {}
        self.finished = [r.name for r in runs if r not in self.waiting]
        self.failed: list[str] = []
        self.durations: list[float] = []  # of the runs this sweep ran to the end
        self.started = time.monotonic()
        self.last_report = (0.0, 0)

    def run(self) -> int:
        """Run every unfinished run; 0 if all finished, 1 if any failed."""
        for name in self.finished:
            self.say(f"{name}: finished earlier, not run again")
        try:
            while self.waiting or self.running:
                while self.waiting and len(self.running) < self.jobs:
                    self.start(self.waiting.pop(0))
                self.collect()
                self.report_progress()
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.stop_all()
            self.say(f"interrupted: run the same command again to resume {self.unfinished()}")
            return INTERRUPTED
        self.say(
            f"done: {len(self.finished)} finished, {len(self.failed)} failed"
            + (f" ({', '.join(self.failed)})" if self.failed else "")
        )
        return 1 if self.failed else 0

    def start(self, run: PlannedRun) -> None:
        folder = RUNS_DIR / run.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OWNER_FILE).write_text(json.dumps({"sweep": run.sweep}))
        process = multiprocessing.get_context("spawn").Process(
            target=_execute, args=(run.given, folder), name=run.name
        )
        process.start()
        self.running[run.name] = (run, process, time.monotonic())
        done = read_run(folder).completed_steps
        self.say(f"{run.name}: started" + (f", resuming after step {done - 1}" if done else ""))

    def collect(self) -> None:
        for name, (run, process, started) in list(self.running.items()):
            if process.exitcode is None:
                continue
            del self.running[name]
            seconds = time.monotonic() - started
            took = _clock(seconds)
            if process.exitcode == 0 and read_run(RUNS_DIR / name).is_finished(run.steps):
                self.finished.append(name)
                self.durations.append(seconds)
                self.say(f"{name}: finished in {took}")
            else:
                self.failed.append(name)
                self.say(f"{name}: FAILED after {took}: {_failure(RUNS_DIR / name)}")

    def steps_done(self) -> int:
        return sum(min(_completed_steps(r.name), r.steps) for r in self.runs)

    def report_progress(self) -> None:
        now = time.monotonic() - self.started
        last_time, last_done = self.last_report
        if now - last_time < PROGRESS_EVERY_S:
            return
        done = self.steps_done()
        if done == last_done:
            return
        self.last_report = (now, done)
        total = sum(r.steps for r in self.runs)
        self.say(
            f"{done}/{total} steps ({100 * done // total}%), runs: {len(self.finished)} "
            f"finished, {len(self.running)} running, {len(self.waiting)} waiting, "
            f"{len(self.failed)} failed{self.time_left()}"
        )

    def time_left(self) -> str:
        """From how long the runs this sweep ran took (start-up and evaluations included)."""
        if not self.durations:
            return ""
        runs_left = len(self.waiting) + sum(
            1 - min(_completed_steps(r.name) / r.steps, 1) for r, _, _ in self.running.values()
        )
        mean = sum(self.durations) / len(self.durations)
        return f", about {_clock(mean * runs_left / self.jobs)} left"

    def stop_all(self) -> None:
        """Stop the runs in flight; each resumes from its last completed step next time."""
        for _, process, _ in self.running.values():
            process.terminate()  # papermill stops its kernel as it exits
        for _, process, _ in self.running.values():
            process.join(STOP_GRACE_S)
            if process.exitcode is None:
                process.kill()

    def unfinished(self) -> str:
        names = [r.name for r in self.runs if r.name not in self.finished]
        return ", ".join(names)

    def say(self, line: str) -> None:
        print(f"[{_clock(time.monotonic() - self.started)}] {line}", flush=True)


def _execute(given: dict, folder: Path) -> None:
    """In the run's own process: papermill's and the kernel's output go to the run's log."""
    with open(folder / "papermill.log", "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # papermill shuts its kernel down
    try:
        execute(NOTEBOOK, folder / NOTEBOOK.name, given)
        declared = notebook_defaults(json.loads(EVALUATION.read_text()))
        evaluation = {name: v for name, v in given.items() if name in declared}
        execute(EVALUATION, folder / EVALUATION.name, evaluation | EVALUATION_PARAMETERS)
    except BaseException as error:  # the log has the traceback; the exit code says enough
        print(f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)
        sys.exit(1)


def _completed_steps(run_name: str) -> int:
    """From state.json alone: cheap enough to read every few seconds while runs write it."""
    try:
        state = json.loads((RUNS_DIR / run_name / "state.json").read_text())
    except (OSError, ValueError):  # not written yet, or damaged (the run will say so)
        return 0
    return state.get("completed_steps", 0) if isinstance(state, dict) else 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _failure(folder: Path) -> str:
    """The error an executed notebook shows, in one line, or where to look."""
    for executed in (folder / NOTEBOOK.name, folder / EVALUATION.name):
        try:
            cells = json.loads(executed.read_text())["cells"]
        except (OSError, ValueError, KeyError):  # it never started, or stopped mid-write
            cells = []
        for output in (o for c in cells for o in c.get("outputs", [])):
            if output.get("output_type") == "error":
                return f"{output['ename']}: {output['evalue']} (see {_shown(executed)})"
    return f"see {_shown(folder / 'papermill.log')}"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _short(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def _literal(text: str) -> object:
    """A command-line value as Python reads it (3e-4, None, True), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _jobs(text: str) -> int | str:
    if text == "auto":
        return text
    value = _literal(text)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(
            f"--jobs must be 'auto' or a whole number from 1 to {MAX_JOBS}, not {text!r}"
        )
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grid", type=Path, default=DEFAULT_GRID, help="a TOML grid file")
    parser.add_argument("--name", help="the runs' name prefix (default: the grid file's name)")
    parser.add_argument("--profile", help="notebook 04's size profile (default: the grid file's)")
    parser.add_argument(
        "-p", nargs="+", action="append", default=[], metavar=("NAME", "VALUE"),
        help="a parameter and its value(s); several values give one run each",
    )  # fmt: skip
    parser.add_argument("--jobs", type=_jobs, default="auto", help="runs at once (default: auto)")
    parser.add_argument(
        "--budget-sampled-tokens",
        type=int,
        default=DEFAULT_SWEEP_BUDGET_SAMPLED_TOKENS,
        help="cloud only: what the whole sweep may sample (default: %(default)s tokens)",
    )
    parser.add_argument("--dry-run", action="store_true", help="check and print the plan only")
    return parser.parse_args(argv)


def grid_from(args: argparse.Namespace) -> tuple[dict, str]:
    """The grid file's size profile, its parameters on top, then the -p ones, and the
    sweep's name."""
    try:
        spec = tomllib.loads(args.grid.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CourseConfigError(f"the grid file {args.grid} cannot be read ({error}).") from None
    size = args.profile or spec.get("profile")
    sizes = profile(NOTEBOOK.stem, size) if size else {}
    grid = {**sizes, **spec.get("parameters", {})}
    for name, *values in args.p:
        if not values:
            raise CourseConfigError(f"-p {name} is given no value.")
        parsed = [_literal(v) for v in values]
        grid[name] = parsed if len(parsed) > 1 else parsed[0]
    return grid, args.name if args.name is not None else spec.get("name", "sweep")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        grid, name = grid_from(args)
        runs = plan(grid, name)
        check(runs)
        backends = {run.parameters["backend"] for run in runs}
        backend = "cloud" if "cloud" in backends else "local"
        if backend == "cloud":
            budget_line = check_cloud_budget(runs, args.budget_sampled_tokens)
    except (CourseConfigError, OverBudgetError) as error:
        print(f"sweep not started: {error}", file=sys.stderr)
        return 2
    jobs = min(AUTO_JOBS[backend] if args.jobs == "auto" else args.jobs, len(runs))
    print(
        f"sweep {name!r}: {len(runs)} runs of {NOTEBOOK.relative_to(ROOT)} into "
        f"{_shown(RUNS_DIR)}/, {jobs} at a time; each run's log is papermill.log in its folder"
    )
    for run in runs:
        varying = {k: v for k, v in run.given.items() if k != "run_name"}
        print(f"  {run.name}: {', '.join(f'{k}={v!r}' for k, v in varying.items())}")
    if backend == "cloud":
        print("\n".join([*cloud_budget(runs), budget_line]))
    if args.dry_run:
        return 0
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops the runs, as Ctrl-C does
    # A shell starts a background job (`make sweep &`) with SIGINT ignored, and Python then
    # keeps it ignored: Ctrl-C and `kill -INT` would do nothing. Listen for it regardless.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with local_stack_for("local" if "local" in backends else "cloud"):
        code = Sweep(runs, jobs).run()
    if code != INTERRUPTED:
        print(f"compare the runs in {COMPARE_NOTEBOOK} with runs = {f'{name}-*'!r}")
    return code


if __name__ == "__main__":
    sys.exit(main())

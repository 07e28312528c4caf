"""Write every place a notebook parameter appears from its one declaration: `make docs`.

`helpers.notebook_parameters` declares each parameter once. From it this writes each
notebook's parameters cell (values and comments), its check cell (the one call that returns
its settings object), and the parameter tables of docs/cloud.md and
the instructor's guide, between their `<!-- parameters:start -->` and `<!-- parameters:end -->`
marks; and the guide's list of exercises (exercises/), between `<!-- exercises:start -->` and
`<!-- exercises:end -->`. With `--check` it writes nothing and fails if any of them is stale, which
`tests/repo/test_docs_fresh.py` does too.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

import nbformat

from exercises import all_exercises
from helpers.notebook_parameters import NOTEBOOK_PARAMETERS, Parameter

ROOT = Path(__file__).resolve().parent.parent
LINE_LENGTH = 100  # ruff's, for the notebooks too
CHECK_CALL = re.compile(r"helpers\.settings\(")


def parameters_cell(notebook: str) -> str:
    """The parameters cell: one `name = value  # comment` a parameter, wrapped at 100."""
    lines: list[str] = []
    for name, parameter in NOTEBOOK_PARAMETERS[notebook].items():
        code = f"{name} = {python_literal(parameter.value)}  # "
        first, *rest = textwrap.wrap(
            comment(parameter),
            LINE_LENGTH,
            initial_indent=code,
            subsequent_indent="# ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += [first, *rest]
    return "\n".join(lines)


def comment(parameter: Parameter) -> str:
    """The parameters cell's comment: what it does, its range, what None stands for."""
    described = parameter.rule.describe() if hasattr(parameter.rule, "describe") else ""
    text = f"{parameter.doc}: {described}" if described else parameter.doc
    if parameter.local is not None or parameter.cloud is not None:
        local, cloud = _prose(parameter.local), _prose(parameter.cloud)
        text += f"; None: {local} locally, {cloud} in the cloud"
    return text


def _prose(value: object) -> str:
    """A default as prose: 1,024; 1e-4 rather than 0.0001."""
    if isinstance(value, float) and 0 < value < 1e-3:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{value}"


def check_cell(notebook: str) -> str:
    """The cell after the parameters: every value checked, read from one settings object."""
    why = (
        "# Every parameter is checked before anything slow: a bad one stops here, in one sentence."
    )
    return f'{why}\nimport helpers\n\ncfg = helpers.settings("{notebook}", globals())'


def defaults_table() -> str:
    """docs/cloud.md's table: each parameter that is None by default, and what None means."""
    rows = ['| Notebook | Parameter | `backend="local"` | `backend="cloud"` |', "|---|---|---|---|"]
    for notebook, parameters in NOTEBOOK_PARAMETERS.items():
        for name, parameter in parameters.items():
            if parameter.value is None:
                rows.append(
                    f"| {notebook[:2]} | `{name}` | {_cell(parameter.local)} | "
                    f"{_cell(parameter.cloud)} |"
                )
    return "\n".join(rows)


def parameters_table() -> str:
    """The instructor's guide's table: every parameter of every notebook, with its range."""
    rows = ["| Notebook | Parameter | Value | What it is, and its range |", "|---|---|---|---|"]
    for notebook, parameters in NOTEBOOK_PARAMETERS.items():
        for name, parameter in parameters.items():
            value = python_literal(parameter.value)
            rows.append(f"| `{notebook}` | `{name}` | `{value}` | {_escape(parameter)} |")
    return "\n".join(rows)


def exercises_table() -> str:
    """The instructor's guide's list of exercises: minutes and the most common mistakes."""
    rows = ["| Notebook | Exercise | Minutes | Most common mistakes |", "|---|---|---|---|"]
    for exercise in all_exercises().values():
        mistakes = "; ".join(m.name for m in exercise.mistakes[:3]).replace("|", "\\|")
        rows.append(
            f"| `{exercise.notebook}` | `{exercise.name}` | {exercise.minutes} | {mistakes} |"
        )
    return "\n".join(rows)


def python_literal(value: object) -> str:
    """`value` as a parameters cell writes it: double-quoted strings, 1_000_000."""
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"{value:_}"
    return repr(value)


def _cell(value: object) -> str:
    return f"`{python_literal(value)}`"


def _escape(parameter: Parameter) -> str:
    return comment(parameter).replace("|", "\\|")


def expected_files() -> dict[Path, str]:
    """Every file `make docs` writes, with the text it should have."""
    files: dict[Path, str] = {}
    for notebook in NOTEBOOK_PARAMETERS:
        path = ROOT / "notebooks" / f"{notebook}.ipynb"
        files[path] = _notebook_text(path, notebook)
    cloud_page = ROOT / "docs" / "cloud.md"
    files[cloud_page] = _between_marks(cloud_page, "parameters", defaults_table())
    guide = ROOT / "docs" / "instructor.md"
    files[guide] = _between_marks(guide, "parameters", parameters_table())
    files[guide] = _between_marks(guide, "exercises", exercises_table(), files[guide])
    return files


def _notebook_text(path: Path, notebook: str) -> str:
    book = nbformat.read(path, as_version=4)
    [parameters] = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
    parameters.source = parameters_cell(notebook)
    checks = [c for c in book.cells if c.cell_type == "code" and CHECK_CALL.search(c.source)]
    if len(checks) != 1:
        raise SystemExit(
            f"{path.name}: expected one cell calling helpers.settings, not {len(checks)}"
        )
    checks[0].source = check_cell(notebook)
    return nbformat.writes(book) + "\n"


def _between_marks(path: Path, name: str, table: str, text: str | None = None) -> str:
    """`text` (by default the file's) with `table` between the `name` marks."""
    text = path.read_text() if text is None else text
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if text.count(start) != 1 or text.count(end) != 1:
        raise SystemExit(f"{path}: needs one {start} and one {end} line")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{table}\n{end}{tail}"


def stale_files() -> list[Path]:
    return [path for path, text in expected_files().items() if path.read_text() != text]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; fail if stale")
    args = parser.parse_args()
    if args.check:
        if stale := stale_files():
            names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
            sys.exit(f"stale: {names}; run make docs")
        return
    for path, text in expected_files().items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

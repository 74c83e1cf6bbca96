"""bench/RESULTS.md's current tables stay usable: every row says what was measured, on what
machine and when, and its command still runs as written from the repository root: the
script (`bench/x.py`) or module (`python -m bench.x`) exists and its argparse accepts every
flag the command gives. The figures themselves are a record (bench/HISTORY.md holds every
run), not checked here.

Flags are read from the script's `--help`, run as the command runs it, in a subprocess.
When `--help` cannot start because an optional dependency is missing (the `bench` extra:
torch, sentence-transformers, matplotlib), they are read from the script's `add_argument`
calls instead; a missing module of the project itself fails."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.waits import scaled

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
COLUMNS = ("benchmark", "figure", "command", "machine", "date (utc)", "commit")
PROJECT_PACKAGES = {"bench", "bot", "memory", "plugins", "tests"}
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


@dataclass(frozen=True)
class Row:
    line: int
    section: str
    cells: dict[str, str]

    @property
    def name(self) -> str:
        return f"RESULTS.md:{self.line} [{self.section}] {self.cells['benchmark'][:60]}"


def current_rows(text: str) -> list[Row]:
    """Every row of every table whose header is the current tables' one (COLUMNS). A table
    with a `command` column but another header is malformed and fails here."""
    rows: list[Row] = []
    section = ""
    header: tuple[str, ...] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(line.strip().strip("|"))]
        if header is None:
            header = tuple(c.lower() for c in cells)
            assert "command" not in header or header == COLUMNS, (
                f"RESULTS.md:{n} [{section}]: a current table's header must be "
                f"{' | '.join(COLUMNS)}, not {' | '.join(header)}"
            )
            continue
        if header != COLUMNS or set(line) <= set("|-: "):
            continue
        assert len(cells) == len(COLUMNS), (
            f"RESULTS.md:{n} [{section}]: {len(cells)} cells where the header has {len(COLUMNS)}"
        )
        rows.append(Row(n, section, dict(zip(COLUMNS, cells, strict=True))))
    return rows


@dataclass(frozen=True)
class Invocation:
    """`python bench/x.py ...` or `python -m bench.x ...`, as the command runs it."""

    argv: tuple[str, ...]  # what follows the interpreter, up to the script or module
    script: Path
    flags: tuple[str, ...]


def parse_command(row: Row) -> Invocation:
    spans = re.findall(r"`([^`]+)`", row.cells["command"])
    assert len(spans) == 1, f"{row.name}: the command cell needs exactly one `command`"
    words = shlex.split(spans[0])
    assert words and Path(words[0]).name in ("python", "python3"), (
        f"{row.name}: the command must start with a Python interpreter, not {words[:1]}"
    )
    if words[1:2] == ["-m"]:
        module = words[2]
        assert module.startswith("bench."), f"{row.name}: {module} is not a bench module"
        script = REPO.joinpath(*module.split(".")).with_suffix(".py")
        if not script.is_file():
            script = REPO.joinpath(*module.split("."), "__main__.py")
        argv, rest = ("-m", module), words[3:]
    else:
        script = REPO / words[1]
        argv, rest = (words[1],), words[2:]
    assert script.is_file(), f"{row.name}: {script.relative_to(REPO)} does not exist"
    flags = tuple(w.split("=", 1)[0] for w in rest if re.match(r"--?[A-Za-z]", w))
    return Invocation(argv, script, flags)


def _uses_argparse(script: Path) -> bool:
    return any(
        (isinstance(node, ast.Attribute) and node.attr == "ArgumentParser")
        or (isinstance(node, ast.Name) and node.id == "ArgumentParser")
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8")))
    )


def static_flags(script: Path) -> set[str]:
    """The option strings of every `add_argument(...)` call in the script."""
    found = set()
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            found |= {
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value[:1] == "-"
            }
    return found


def check_commands(
    argv: tuple[str, ...], rows: list[tuple[Row, Invocation]], env: dict[str, str] | None = None
) -> str:
    """Fail, naming each row, unless the script accepts every flag its rows give; return
    where the accepted flags were read."""
    script = rows[0][1].script
    shown = f"python {' '.join(argv)}"
    if not _uses_argparse(script):  # `--help` would run the benchmark itself
        flagged = [f"{row.name}: {shown} takes no flags" for row, inv in rows if inv.flags]
        assert not flagged, "\n".join(flagged)
        return "nowhere: the script takes no arguments"
    declared = static_flags(script)
    done = subprocess.run(
        [sys.executable, *argv, "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    if done.returncode == 0:
        accepted, source = set(_FLAG.findall(done.stdout)), "--help"
        # What the fallback reads is what --help shows: checked on every script that starts.
        assert declared and declared <= accepted, (
            f"{shown}: add_argument calls declare {sorted(declared - accepted)}, which --help "
            "does not show: the static reading no longer matches this script"
        )
    else:
        missing = _MISSING.search(done.stderr)
        if not missing or missing.group(1).split(".")[0] in PROJECT_PACKAGES:
            pytest.fail(
                "; ".join(row.name for row, _ in rows)
                + f": `{shown} --help` exited {done.returncode}:\n{done.stderr[-2000:]}"
            )
        accepted = declared
        source = f"its add_argument calls ({missing.group(1)} is not installed)"
    problems = [
        f"{row.name}: {script.relative_to(REPO)} does not accept "
        f"{', '.join(f for f in inv.flags if f not in accepted)} (flags read from {source})"
        for row, inv in rows
        if any(f not in accepted for f in inv.flags)
    ]
    assert not problems, "\n".join(problems)
    return source


ROWS = current_rows(RESULTS.read_text(encoding="utf-8"))


def _groups() -> dict[tuple[str, ...], list[tuple[Row, Invocation]]]:
    """The rows by the script they run, so each `--help` runs once (each start imports the
    bot's modules: a second or two). Rows whose command does not parse are reported by
    `test_row_names_a_script`."""
    groups: dict[tuple[str, ...], list[tuple[Row, Invocation]]] = {}
    for row in ROWS:
        try:
            inv = parse_command(row)
        except AssertionError:
            continue
        groups.setdefault(inv.argv, []).append((row, inv))
    return groups


GROUPS = _groups()


def test_the_page_has_current_tables() -> None:
    assert len(ROWS) >= 15, f"only {len(ROWS)} current rows found in bench/RESULTS.md"
    sections = {row.section for row in ROWS}
    assert len(sections) >= 10, sorted(sections)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"line{r.line}")
def test_row_says_what_where_and_when(row: Row) -> None:
    empty = [c for c in ("benchmark", "figure", "command", "machine", "commit") if not row.cells[c]]
    assert not empty, f"{row.name}: empty {', '.join(empty)}"
    assert re.match(r"\d{4}-\d{2}-\d{2}\b", row.cells["date (utc)"]), (
        f"{row.name}: the date must start YYYY-MM-DD, not {row.cells['date (utc)']!r}"
    )


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"line{r.line}")
def test_row_names_a_script(row: Row) -> None:
    parse_command(row)


@pytest.mark.parametrize("argv", sorted(GROUPS), ids=" ".join)
def test_commands_run_as_written(argv: tuple[str, ...]) -> None:
    check_commands(argv, GROUPS[argv])


BLOCK_NUMPY = """\
import sys

class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "numpy":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Missing())
"""


def test_a_missing_optional_dependency_falls_back_to_add_argument(tmp_path: Path) -> None:
    """bench/fusion_study.py imports numpy before its parser: without it, --help cannot
    start, and the flags are read from the source, which still catches a wrong one."""
    (tmp_path / "sitecustomize.py").write_text(BLOCK_NUMPY, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    table = "\n".join(
        [
            "## Fusion study",
            "| " + " | ".join(COLUMNS) + " |",
            "|---|---|---|---|---|---|",
            "| fusion | 0.737 | `python -m bench.fusion_study --db all` | m | 2026-11-26 | x |",
            "| fusion | 0.737 | `python -m bench.fusion_study --dbs all` | m | 2026-11-26 | x |",
        ]
    )
    good, bad = ((row, parse_command(row)) for row in current_rows(table))
    argv = ("-m", "bench.fusion_study")
    assert check_commands(argv, [good], env) == ("its add_argument calls (numpy is not installed)")
    with pytest.raises(AssertionError, match=r"RESULTS.md:5 \[Fusion study\].*--dbs"):
        check_commands(argv, [good, bad], env)

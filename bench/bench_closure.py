"""The server's static import closure in lines: what a newcomer reads on the server's path (issue 45).

    python bench/bench_closure.py [--before REF ...] [--suite | --coverage DATA_FILE]

The closure is every module of ours reachable from `mcp_server.__main__` through any import (inside
functions and under TYPE_CHECKING too, as tests/project/test_imports.py reads them). Each tree is
counted in one style: a commit named with --before is extracted with `git archive` and formatted with
this checkout's `ruff format` settings first, so a tree from before the formatter is not counted in
shorter lines. Each line is counted once as code, docstring, comment or blank. The modules the SQLite
worker process imports too (asked of a fresh interpreter in that tree) are shown apart: they are on
the server's path only when the server runs statements in its own process.

With --suite it runs the test suite under coverage.py (less its real-engine and browser tiers;
`pip install coverage`, 7.10 or newer, which follows the SQLite workers and the servers the tests
start), or reads a combined data file of such a run with --coverage, and prints how many of the
closure's statements the suite runs, and the floor: the closure with every statement no test runs
removed, and its docstrings, comments and blank lines in proportion. A worker stopped before it
writes its data counts as not run, so the floor is a low one. Not a timing: the figures are counts.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import subprocess
import sys
import tempfile
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from trees import extract_tree  # beside this file

ROOT = Path(__file__).resolve().parents[1]
SERVER, WORKER = "mcp_server.__main__", "agent.sqlite._worker"
KINDS = ("code", "docstring", "comment", "blank")


@dataclass(frozen=True)
class Tree:
    """A checkout's product modules by dotted name."""

    root: Path
    modules: dict[str, Path]

    @classmethod
    def at(cls, root: Path) -> Tree:
        """The modules of `agent` and `mcp_server` under `root`."""
        modules = {}
        for path in sorted([*root.glob("agent/**/*.py"), *root.glob("mcp_server/**/*.py")]):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        return cls(root, modules)

    def imports(self, name: str) -> set[str]:
        """The modules of ours that `name` imports anywhere, with the packages each passes through."""
        path = self.modules[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parents, *([node.module] if node.module else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                parts = target.split(".")  # importing a.b.c imports a and a.b first
                found.update(q for i in range(1, len(parts) + 1) if (q := ".".join(parts[:i])) in self.modules)
        return found

    def closure(self, start: str) -> set[str]:
        """Every module reachable from `start`."""
        seen: set[str] = set()
        todo = [start]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.imports(name) - seen)
        return seen

    def imported_by(self, module: str) -> set[str]:
        """The modules of ours a fresh interpreter holds after importing `module` from this tree."""
        listing = "import sys, importlib; importlib.import_module(sys.argv[1]); print(*sorted(sys.modules))"
        run = subprocess.run(
            [sys.executable, "-c", listing, module],
            cwd=self.root,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return set(run.stdout.split()) & set(self.modules)


def line_kinds(path: Path) -> Counter[str]:
    """How many of the file's lines are code, docstring, comment and blank (each line once)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            match node.body:
                case [ast.Expr(value=ast.Constant(value=str())) as first, *_]:
                    docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    layout = (
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
    )
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in layout:
            code.update(range(token.start[0], token.end[0] + 1))
    counts: Counter[str] = Counter()
    for number, line in enumerate(lines, start=1):
        if number in docstrings:
            counts["docstring"] += 1
        elif number in code:
            counts["code"] += 1
        else:
            counts["comment" if line.strip() else "blank"] += 1
    return counts


def count(modules: set[str], tree: Tree) -> Counter[str]:
    """The lines of `modules` by kind."""
    total: Counter[str] = Counter()
    for name in modules:
        total.update(line_kinds(tree.modules[name]))
    return total


def report(label: str, tree: Tree) -> None:
    """Print the tree's closure, by kind, and what it shares with the worker."""
    server = tree.closure(SERVER)
    shared = server & tree.imported_by(WORKER)
    kinds = count(server, tree)
    product = count(set(tree.modules), tree)
    print(f"{label}:")
    print(f"  closure of {SERVER}: {len(server)} modules, {sum(kinds.values()):,} lines")
    print("    " + ", ".join(f"{kind} {kinds[kind]:,}" for kind in KINDS))
    print(
        f"    of them imported by the SQLite worker too: {len(shared)} modules, "
        f"{sum(count(shared, tree).values()):,} lines"
    )
    print(
        f"  the whole product (agent, mcp_server): {len(tree.modules)} modules, {sum(product.values()):,} lines"
    )


COVERAGE_SETTINGS = """\
[run]
source = agent, mcp_server
data_file = {data_file}
parallel = true
patch = subprocess
concurrency = thread, multiprocessing
"""


def run_suite(folder: Path) -> Path:
    """Run the suite under coverage.py from this checkout; the path of its combined data."""
    data_file = folder / ".coverage"
    settings = folder / "coveragerc"
    settings.write_text(COVERAGE_SETTINGS.format(data_file=data_file), encoding="utf-8")
    coverage = [sys.executable, "-m", "coverage"]
    tests = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not real_engine and not browser"]
    environment = {**os.environ, "COVERAGE_RCFILE": str(settings)}
    subprocess.run([*coverage, "run", f"--rcfile={settings}", *tests], cwd=ROOT, env=environment, check=True)
    subprocess.run([*coverage, "combine", "-q", f"--rcfile={settings}"], cwd=ROOT, env=environment, check=True)
    return data_file


def coverage_floor(tree: Tree, data_file: Path) -> None:
    """Print the closure's statements the suite runs, and the closure without the rest."""
    import coverage

    measured = coverage.Coverage(data_file=str(data_file))
    measured.load()
    statements = missing = lines = 0
    for name in sorted(tree.closure(SERVER)):
        path = tree.modules[name]
        _, run_able, _, not_run, _ = measured.analysis2(str(path.resolve()))
        statements += len(run_able)
        missing += len(not_run)
        lines += len(path.read_text(encoding="utf-8").splitlines())
    ran = statements - missing
    print(f"  statements the suite runs: {ran:,} of {statements:,} ({ran / statements:.1%})")
    print(
        f"  floor: the closure without the statements no test runs (docs and blank lines in proportion): "
        f"{round(lines * ran / statements):,} lines"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--before", metavar="REF", action="append", default=[], help="also count this commit's tree"
    )
    measured = parser.add_mutually_exclusive_group()
    measured.add_argument("--suite", action="store_true", help="run the suite under coverage.py for the floor")
    measured.add_argument(
        "--coverage", metavar="DATA_FILE", type=Path, help="the suite's combined coverage data"
    )
    args = parser.parse_args()
    if args.suite or args.coverage:
        try:
            import coverage  # noqa: F401
        except ImportError:
            parser.error("--suite and --coverage need coverage.py 7.10 or newer: pip install coverage")
    for ref in args.before:
        with tempfile.TemporaryDirectory() as tmp:
            extract_tree(ref, Path(tmp), "agent", "mcp_server")
            ruff = [sys.executable, "-m", "ruff", "format", "--quiet", "--config", str(ROOT / "pyproject.toml")]
            subprocess.run([*ruff, tmp], check=True, timeout=120)
            report(f"{ref}, formatted as this checkout", Tree.at(Path(tmp)))
    tree = Tree.at(ROOT)
    report("this checkout", tree)
    if args.coverage is not None:
        coverage_floor(tree, args.coverage)
    elif args.suite:
        with tempfile.TemporaryDirectory() as folder:
            coverage_floor(tree, run_suite(Path(folder)))


if __name__ == "__main__":
    main()

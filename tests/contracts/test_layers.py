"""The floor plan holds (CONTRIBUTING.md "Layers"): import-linter's contracts in pyproject.toml pass, a wrong
import fails them with the contract's name, skyrl_core and the engine have no import cycles (counted with grimp),
and the engine's imports made inside functions are few, each saying why."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"skyrl_core": "skyrl_core", "skyrl_nb": "skyrl_nb", "skyrl_engine": "backend/skyrl_engine",
            "skyrl_widgets": "widgets/skyrl_widgets"}
# Runs import-linter on the packages under the given folders (first on sys.path, so a copy shadows the install).
LINT = """
import sys
sys.path[:0] = sys.argv[1:]
sys.argv = ["lint-imports", "--no-cache"]
from importlinter.cli import lint_imports_command
lint_imports_command()
"""
MAX_ENGINE_LAZY_IMPORTS = 20


def _lint(root: Path) -> subprocess.CompletedProcess:
    folders = [str(root), str(root / "backend"), str(root / "widgets")]
    return subprocess.run([sys.executable, "-c", LINT, *folders], capture_output=True, text=True, timeout=300,
                          cwd=root)


def test_import_contracts_hold_and_a_wrong_import_breaks_them_by_name(tmp_path: Path) -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout, done.stdout[-2000:]

    # the same tree with one arrow pointing up: skyrl_core importing the notebook side
    copy = tmp_path / "tree"
    for rel in PACKAGES.values():
        shutil.copytree(ROOT / rel, copy / rel, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    choices = copy / "skyrl_core" / "choices.py"
    choices.write_text(choices.read_text() + "\nimport skyrl_nb.jobs  # noqa: E402,F401 - the wrong arrow\n")
    broken = _lint(copy)
    assert broken.returncode != 0
    assert "layers: skyrl_nb on top" in broken.stdout and "BROKEN" in broken.stdout
    assert "skyrl_core.choices -> skyrl_nb.jobs" in broken.stdout


def test_no_import_cycles_in_skyrl_core_or_the_engine() -> None:
    grimp = pytest.importorskip("grimp")
    import networkx as nx

    graph = grimp.build_graph("skyrl_core", "skyrl_engine", cache_dir=None, exclude_type_checking_imports=True)
    for package in ("skyrl_core", "skyrl_engine"):
        edges = nx.DiGraph()
        for module in graph.find_children(package) | {package}:
            for imported in graph.find_modules_directly_imported_by(module):
                if imported.split(".")[0] == package:
                    edges.add_edge(module, imported)
        cycles = [sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1]
        assert cycles == [], f"import cycles in {package}: {cycles}"


def _engine_imports_inside_functions() -> list[tuple[str, int, str]]:
    """``(file, line, module)`` of every import of the engine made inside one of its functions."""
    found = []
    for path in sorted((ROOT / "backend" / "skyrl_engine").glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "skyrl_engine":
                    found.append((path.name, node.lineno, node.module))
    return sorted(set(found))


def test_the_engine_imports_itself_inside_functions_rarely_and_says_why() -> None:
    lazy = _engine_imports_inside_functions()
    assert len(lazy) < MAX_ENGINE_LAZY_IMPORTS, "\n".join(f"{f}:{n} {m}" for f, n, m in lazy)
    for file, line, module in lazy:
        lines = (ROOT / "backend" / "skyrl_engine" / file).read_text().splitlines()
        said = lines[line - 1] + lines[line - 2]  # the import's own line or the one above it
        assert "#" in said, f"{file}:{line}: `from {module} import ...` inside a function says no reason"


RUN_STATE_WORDS = {"pending", "running", "succeeded", "failed", "stopped", "lost", "damaged", "no_status", "unreadable"}
PRODUCT = ("skyrl_core", "skyrl_nb", "widgets/skyrl_widgets", "backend/skyrl_engine")


def _state_literals(path: Path) -> list[tuple[int, str]]:
    """String constants in ``path`` spelling a run state, outside docstrings and field names (``d["lost"]``,
    ``d.get("lost")``: the status' flag of that name)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            skip.add(id(node.args[0]))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in RUN_STATE_WORDS and id(node) not in skip]


def test_run_states_are_spelled_only_in_skyrl_cores_enums() -> None:
    """Every run state the product writes or compares is ``RunState`` / ``ReadState`` (skyrl_core.choices); a word
    that spells one in another sense (a RayCluster's state) says so on its line."""
    found = []
    for root in PRODUCT:
        for path in sorted((ROOT / root).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == "skyrl_core/choices.py":
                continue
            lines = path.read_text().splitlines()
            found += [f"{path.relative_to(ROOT)}:{n}: {word!r}" for n, word in _state_literals(path)
                      if "not a run state" not in lines[n - 1]]
    assert found == [], "run-state literals outside skyrl_core.choices:\n" + "\n".join(found)


def test_no_product_file_outgrows_one_reader() -> None:
    """No product module is over 600 lines; one over 400 says in its docstring why it is one idea."""
    long = []
    for root in PRODUCT:
        for path in sorted((ROOT / root).rglob("*.py")):
            text = path.read_text()
            lines = len(text.splitlines())
            assert lines <= 600, f"{path.relative_to(ROOT)}: {lines} lines"
            if lines > 400:
                doc = ast.get_docstring(ast.parse(text)) or ""
                if "one idea" not in doc.lower():
                    long.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert long == [], "over 400 lines without saying why they are one idea: " + ", ".join(long)


# tests of the pieces the composition root puts together: they put them together by hand on purpose
BY_HAND = {"tests/engine/test_trainer.py", "tests/async/test_async_trainer.py", "tests/engine/test_data_parallel.py",
           "tests/combination_matrix.py", "tests/notebook/test_resume.py"}


def test_one_composition_root() -> None:
    """``Workers.create(`` and ``RLTrainer(`` are called in ``skyrl_engine.build`` and, outside it, only by the tests
    of those pieces; the CLI, the benches and every other test build through ``build``."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith((".venv/", "backend/skyrl_engine/build.py")) or rel in BY_HAND or "/." in rel:
            continue
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else (f"{getattr(f.value, 'id', '')}.{f.attr}"
                                                              if isinstance(f, ast.Attribute) else "")
                if name in ("RLTrainer", "Workers.create"):
                    found.append(f"{rel}:{node.lineno} {name}(")
    assert found == [], "built by hand outside skyrl_engine.build:\n" + "\n".join(found)

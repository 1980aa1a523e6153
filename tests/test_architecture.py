"""The layout's rules, checked on every test run: one-way import floors (import-linter's contract in
pyproject.toml), no import cycle between modules, source files of at most 350 lines and functions under 60 lines
(the packages and the script packages bench/, recipes/, tools/ alike), no edit of the import path (sys.path)
outside tests/, no singleton set through `global`, shell scripts that run modules (`python -m`), not files, and
every package module named in the module table of docs/ARCHITECTURE.md."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "corpus", "encoder", "training", "indexer", "fill", "evaluation", "service")
SCRIPT_PACKAGES = ("bench", "recipes", "tools")  # run from the checkout with `python -m`; not in the wheel
MAX_LINES = 350
MAX_FUNCTION_LINES = 60


def _lint(cwd: Path, config: Path) -> subprocess.CompletedProcess:
    """import-linter's own command line on `config`, importing the packages found in `cwd`."""
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))"
    )
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [sys.executable, "-c", code, str(config)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_layer_contract_is_kept():
    proc = _lint(ROOT, ROOT / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert sorted(config["root_packages"]) == sorted(PACKAGES + SCRIPT_PACKAGES)  # every package is under it


def test_layer_contract_catches_an_upward_import_inside_a_function(tmp_path):
    """The same kind of contract on a toy tree: an import hidden in a function body still breaks it."""
    for pkg, body in {
        "low_pkg": "def f():\n    from high_pkg import g\n    return g\n",
        "high_pkg": "import low_pkg\n\ndef g():\n    return low_pkg\n",
    }.items():
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text(body)
    config = tmp_path / "pyproject.toml"
    config.write_text(
        textwrap.dedent("""
        [tool.importlinter]
        root_packages = ["low_pkg", "high_pkg"]

        [[tool.importlinter.contracts]]
        name = "toy layers"
        type = "layers"
        layers = ["high_pkg", "low_pkg"]
    """)
    )
    proc = _lint(tmp_path, config)
    assert proc.returncode != 0
    assert "BROKEN" in proc.stdout and "low_pkg -> high_pkg" in proc.stdout


def _cycles(graph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def test_no_import_cycle_between_modules():
    graph = grimp.build_graph(*PACKAGES, *SCRIPT_PACKAGES)
    # a package's __init__ is not a module of its own here: its children import each other
    modules = {m for m in graph.modules if m.split(".")[0] in PACKAGES + SCRIPT_PACKAGES}
    assert _cycles(graph, modules) == []


def test_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c", "d"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert _cycles(graph, {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def _modules(packages: tuple[str, ...] = PACKAGES + SCRIPT_PACKAGES) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Functions (and methods) of `source` longer than `limit` lines, decorators excluded: {name: lines}."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                out[f"{node.name} (line {node.lineno})"] = lines
    return out


def test_source_files_stay_small():
    long = {}
    for path in _modules():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long[str(path.relative_to(ROOT))] = n
    assert long == {}


def test_functions_stay_short():
    long = {}
    for path in _modules():
        for name, n in long_functions(path.read_text(encoding="utf-8")).items():
            long[f"{path.relative_to(ROOT)}: {name}"] = n
    assert long == {}


def test_the_function_rule_catches_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    assert long_functions(f"def short():\n    return 1\n\n\ndef long():\n{body}\n") == {"long (line 5)": 61}


# an edit of the import path: sys.path.insert / append / extend / remove / pop / clear, an assignment to it or to
# a slice of it, `+=`
SYS_PATH_EDIT = re.compile(
    r"\bsys\s*\.\s*path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\(|\[[^\]\n]*\]\s*=(?!=)|\+?=(?!=))"
)


def sys_path_edits(source: str) -> list[int]:
    """The lines (1-based) of `source` (Python, or a shell script's Python here-documents) that edit sys.path."""
    return [n for n, line in enumerate(source.splitlines(), 1) if SYS_PATH_EDIT.search(line)]


def _scripts_and_sources() -> list[Path]:
    """Every Python file and shell script outside tests/: the packages, the script packages, deploy/, .ci/."""
    out = _modules()
    for folder in SCRIPT_PACKAGES + ("deploy",):
        out += sorted((ROOT / folder).rglob("*.sh"))
    out += sorted((ROOT / "deploy").rglob("*.py")) + sorted(p for p in (ROOT / ".ci").iterdir() if p.is_file())
    return out


def test_no_sys_path_edit_outside_tests():
    """Modules import each other by package (`python -m` from the repository root puts it on the path)."""
    edits = {}
    for path in _scripts_and_sources():
        if lines := sys_path_edits(path.read_text(encoding="utf-8")):
            edits[str(path.relative_to(ROOT))] = lines
    assert edits == {}


def test_the_sys_path_rule_catches_an_edit():
    source = textwrap.dedent("""\
        import sys
        sys.path.insert(0, "bench")
        sys.path[:0] = [tree]
        sys.path.append(str(ROOT))
        sys.path += ["x"]
        sys.path = ["y"]
        print(sys.path)
        if "x" in sys.path or sys.path == []:
            pass
        sys.path[0] == "z"
    """)
    assert sys_path_edits(source) == [2, 3, 4, 5, 6]


def global_statements(source: str) -> list[int]:
    """Lines of `source` with a `global` statement (a module-level singleton set from a function)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Global)]


def test_no_module_keeps_a_singleton_in_a_global():
    """A process-wide object is owned where it is opened or made by a cached factory (functools.cache), never
    set through `global` (the fill path's rule: no globals)."""
    found = {}
    for path in _modules(PACKAGES):
        if lines := global_statements(path.read_text(encoding="utf-8")):
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def test_the_global_rule_catches_a_global():
    source = textwrap.dedent("""\
        _x = None
        def get():
            global _x
            if _x is None:
                _x = object()
            return _x
        def other():
            return _x
    """)
    assert global_statements(source) == [3]


# a Python file run by its path (`python bench/x.py`, `"$VENV/bin/python" recipes/x.py`, `"$PY" recipes/x.py`)
# instead of as a module
RUN_BY_PATH = re.compile(r"(?:python3?|\$\{?(?:PY|py)\}?)\"?\s+(?:\S*/)?(?:bench|recipes|tools)/\w+\.py\b")


def test_shell_scripts_run_modules_not_files():
    """Shell scripts run the script packages' modules with `python -m` (by path, their imports would break)."""
    by_path = {}
    for path in _scripts_and_sources():
        if path.suffix != ".py" and (hits := RUN_BY_PATH.findall(path.read_text(encoding="utf-8"))):
            by_path[str(path.relative_to(ROOT))] = hits
    assert by_path == {}
    assert RUN_BY_PATH.findall('"$VENV/bin/python" recipes/blend_models.py --alpha 0.5') != []
    assert RUN_BY_PATH.findall('"$py" bench/probes.py --n 300') != []
    assert RUN_BY_PATH.findall('"$VENV/bin/python" -m recipes.blend_models  # recipes/blend_models.py') == []


def layout_names(text: str) -> set[str]:
    """The module paths of a module table: the first cell of each row, one module a row."""
    return set(re.findall(r"^\| `([\w/]+\.py)` \|", text, re.M))


def test_the_module_table_names_every_source_module():
    named = layout_names((ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    modules = {str(p.relative_to(ROOT)) for p in _modules() if p.name != "__init__.py"}
    assert sorted(modules - named) == [], "modules missing from the module table of docs/ARCHITECTURE.md"
    assert sorted(named - modules) == [], "the module table of docs/ARCHITECTURE.md names modules that do not exist"


def test_the_readme_is_a_short_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 250, f"README.md has {len(readme)} lines: move the details to docs/"
    assert readme[2:6] == ["```bash", readme[3], readme[4], "```"]  # the two commands first
    assert readme[3].startswith("bash deploy/demo.sh") and readme[4].startswith("bash deploy/test.sh")


def test_the_status_pages_say_where_main_stands_and_keep_their_history_apart():
    """docs/QUALITY.md and docs/BENCHMARKS.md are current-state pages (at most 400 lines); their record grows in
    docs/history/, which each page links."""
    for page in ("QUALITY.md", "BENCHMARKS.md"):
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 400, f"docs/{page} is past 400 lines: move what is history to docs/history/"
        assert (ROOT / "docs" / "history" / page).is_file() and f"(history/{page})" in text


def test_the_readme_rule_reads_the_table():
    table = "| `fill/engine.py` | the facade (`fill/ranker.py` is named, not listed) |\n| `a/b.py` | x |\n"
    assert layout_names(table) == {"fill/engine.py", "a/b.py"}

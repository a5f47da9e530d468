"""`modeling/` is the single source of the model code: the editable install and a wheel both expose it."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tiny_models import HUB_CODE_FILES

import dlite_hf.modeling.modeling_dlite as modeling_module

ROOT = Path(__file__).resolve().parents[1]


def test_editable_install_imports_the_repository_modeling_folder():
    assert Path(modeling_module.__file__).resolve() == (ROOT / "modeling" / "modeling_dlite.py").resolve()
    # the tests' list of the Hub code files is the folder's (every module but the package's __init__.py)
    modules = sorted(path.name for path in (ROOT / "modeling").glob("*.py") if path.name != "__init__.py")
    assert modules == sorted(HUB_CODE_FILES)


@pytest.mark.heavy  # builds a wheel: in `make test` and CI, not test-fast
def test_wheel_contains_the_modeling_files_once(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("dlite_hf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in HUB_CODE_FILES:
        matches = [n for n in names if n.endswith("/" + name)]
        assert matches == [f"dlite_hf/modeling/{name}"], matches
        assert zipfile.ZipFile(wheel).read(matches[0]) == (ROOT / "modeling" / name).read_bytes()
    assert "dlite_hf/templates/model_card.md" in names
    # every module of the source tree is in the wheel (a subpackage missing from pyproject's list would not be)
    source = {
        f"dlite_hf/{p.relative_to(ROOT / 'src' / 'dlite_hf').as_posix()}"
        for p in (ROOT / "src" / "dlite_hf").rglob("*.py")
    }
    assert source <= set(names), sorted(source - set(names))


def test_shipped_drafter_links_to_the_single_source():
    for name in HUB_CODE_FILES:
        path = ROOT / "drafters" / "dlite-smollm2-135m" / name
        assert path.is_symlink() and path.resolve() == (ROOT / "modeling" / name).resolve()


def _module_level_imports(path: Path, module: str, is_package: bool) -> set[str]:
    """The dlite_hf modules `module` imports when it is imported (top-level statements; lazy imports excluded)."""
    import ast

    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith("dlite_hf")}


def test_no_import_cycles_between_the_package_modules():
    """Every module imports only modules that do not import it back (directly or through others) at import time."""
    sources = {"dlite_hf": ROOT / "src" / "dlite_hf", "dlite_hf.modeling": ROOT / "modeling"}
    modules = {}
    for prefix, folder in sources.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join([prefix, *parts]).removesuffix(".__init__")
            if prefix == "dlite_hf" and parts[0] == "modeling":
                continue
            modules[name] = path
    graph = {
        name: {dep for dep in _module_level_imports(path, name, path.name == "__init__.py") if dep in modules} - {name}
        for name, path in modules.items()
    }
    assert {"dlite_hf.cli", "dlite_hf.bench.command", "dlite_hf.modeling.candidate_generators"} <= graph.keys()
    # the check sees real edges: relative imports out of a subpackage module and between its siblings
    assert "dlite_hf.defaults" in graph["dlite_hf.demo.models"]
    assert {"dlite_hf.demo.runner", "dlite_hf.demo.models"} <= graph["dlite_hf.demo.page"]

    def cycle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for dep in graph[node]:
                if dep == start:
                    return [*path, start]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
        return None

    cycles = [cycle for cycle in map(cycle_from, graph) if cycle]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_every_test_path_the_scripts_name_exists():
    """CI's second step (scripts/test_transformers_release.sh) and the Makefile name test files by path; a file
    that was split or renamed must not leave a path behind (pytest stops with 'file or directory not found')."""
    named = set()
    for script in (ROOT / "scripts" / "test_transformers_release.sh", ROOT / "Makefile", ROOT / ".ci" / "run"):
        named |= set(re.findall(r"\btests/[\w/]+\.py\b", script.read_text()))
    assert "tests/generate/test_greedy.py" in named  # the pattern sees the release script's list
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, f"paths named in the scripts that do not exist: {missing}"

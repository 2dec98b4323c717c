"""The package's layers (docs/architecture.md): the rule, what it covers, and the old module paths.

The rule itself is import-linter's ``layers`` contract in pyproject.toml (``[tool.importlinter]``), checked
by ``lint-imports``; these tests check that the contract covers every module of ``tuner/``, that it catches an
import that goes up, and the house rules import-linter does not state: no module imports a private name of
another package, and no code uses tuner 0.1's module paths (``tuner/moved.py`` keeps them importable).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT

TUNER = ROOT / "tuner"
#: Modules of tuner/ outside every layer: the package itself (its lazy public names), ``python -m tuner``,
#: and the old paths' aliases, which import nothing of tuner by name.
OUTSIDE_THE_LAYERS = {"tuner", "tuner.__main__", "tuner.moved"}


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return contract["layers"]


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> list[str]:
    return sorted(_module_of(p) for p in TUNER.rglob("*.py"))


def test_every_module_of_tuner_is_in_one_layer():
    layers = _layers()
    assert len(layers) == len(set(layers)) >= 10
    for module in _modules():
        if module in OUTSIDE_THE_LAYERS:
            continue
        homes = [layer for layer in layers if module == layer or module.startswith(layer + ".")]
        assert len(homes) == 1, f"{module} is in no layer of pyproject.toml's [tool.importlinter] contract: add it"
    for layer in layers:
        assert any(m == layer or m.startswith(layer + ".") for m in _modules()), f"layer {layer} names no module"


def _lint_imports(cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint)], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def test_the_layers_contract_is_kept():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 kept, 0 broken" in out.stdout


def test_an_import_that_goes_up_a_layer_breaks_the_contract(tmp_path):
    """A copy of tuner/ where the experiment folder's storage imports the search space (a lower layer importing
    a higher one, inside a function as tuner's lazy imports are) fails lint-imports, naming the import."""
    shutil.copytree(TUNER, tmp_path / "tuner", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    storage = tmp_path / "tuner" / "experiment" / "storage.py"
    storage.write_text(storage.read_text() + "\n\ndef _upward():\n    from tuner.search import space\n\n"
                       "    return space\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = _lint_imports(tmp_path, env)
    assert out.returncode == 1, out.stdout[-3000:]
    assert "tuner.experiment is not allowed to import tuner.search" in out.stdout
    assert "tuner.experiment.storage -> tuner.search.space" in out.stdout


def _package_of(module: str) -> str:
    return module if (ROOT / module.replace(".", "/") / "__init__.py").is_file() else module.rpartition(".")[0]


def _private_imports(path: Path, text: str | None = None) -> list[str]:
    """``file:line: module._name`` for each ``from tuner.x import _name`` that crosses into another package.

    Args:
        path: A module of tuner/ (its package is the importer's).
        text: Its source, if not the file's.
    """
    own = _package_of(_module_of(path))
    source = path.read_text() if text is None else text
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("tuner"):
            for alias in node.names:
                if re.match(r"_[^_]", alias.name) and _package_of(node.module) != own:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}")
    return found


def test_no_module_imports_a_private_name_of_another_package():
    """A name with a leading underscore is private to its package: no module of tuner/ imports one from another
    package (it would be that package's public name, with a docstring)."""
    assert [hit for path in sorted(TUNER.rglob("*.py")) for hit in _private_imports(path)] == []


def test_the_private_import_check_finds_one():
    module = TUNER / "search" / "space.py"
    source = "from tuner.spec.errors import _fail\nfrom tuner.search.pareto import _front\n"
    assert _private_imports(module, source) == ["tuner/search/space.py:1: tuner.spec.errors._fail"]


def _old_paths_in(text: str) -> list[str]:
    from tuner.moved import MOVED, SPLIT

    return re.findall(r"(?<![\w./])(" + "|".join(map(re.escape, [*MOVED, *SPLIT])) + r")\b(?!\.py)", text)


def test_no_code_uses_an_old_module_path():
    """tuner 0.1's paths (``tuner.engine``, ...) are for old code and old experiments only: tuner, its tests,
    benchmarks and examples import the new ones."""
    found = {}
    for folder in ("tuner", "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "moved.py" or path == Path(__file__).resolve():
                continue
            if hits := _old_paths_in(path.read_text()):
                found[str(path.relative_to(ROOT))] = sorted(set(hits))
    found.pop("tuner/__init__.py", None)  # its comment names one, to say what moved.install() is for
    assert found == {}


def test_the_old_module_paths_still_import_as_the_same_modules():
    """Code written against tuner 0.1 imports the same module objects, and a pickle that names a class or
    function by its old path (as an experiment's ``tuner.pkl`` saved by 0.1 does) loads."""
    code = (
        "import importlib, pickle\n"
        "import tuner\n"
        "from tuner.moved import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
        "import tuner.engine, tuner.reporting, tuner.run.engine, tuner.run.prepare, tuner.run.console\n"
        "import tuner.run.loggers\n"
        "assert tuner.engine.tune_model is tuner.run.engine.tune_model\n"
        "assert tuner.engine.prepare_resume is tuner.run.prepare.prepare_resume\n"
        "assert tuner.reporting.TableReporter is tuner.run.console.TableReporter\n"
        "assert tuner.reporting.JsonLogger is tuner.run.loggers.JsonLogger\n"
        "assert pickle.loads(pickle.dumps(tuner.run.loggers.JsonLogger)) is tuner.run.loggers.JsonLogger\n"
        "assert pickle.loads(b'ctuner.reporting\\nTableReporter\\n.') is tuner.run.console.TableReporter\n"
        "from tuner.resources import ClusterResources, trials_that_fit\n"
        "from tuner.resources.sizing import ClusterResources as C\n"
        "assert ClusterResources is C\n"
        "print(pickle.loads(b'ctuner.search.space\\nplain\\n.').__module__)\n"
        "print(pickle.loads(b'ctuner.space\\nplain\\n.').__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["tuner.search.space", "tuner.search.space"]


def test_an_unknown_old_path_still_fails():
    with pytest.raises(ModuleNotFoundError):
        __import__("tuner.no_such_module")

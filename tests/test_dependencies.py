"""pyproject.toml declares every package that tuner/ imports, with a lower bound, and Ray's range."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.fixtures.paths import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

#: Packages tuner needs although no tuner module imports them: another package imports them
#: on tuner's behalf without requiring them.
INDIRECT = {
    "scikit-learn": "tuner/report/analysis.py: Optuna's FanovaImportanceEvaluator imports sklearn; Optuna does not require it",
}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, Requirement]:
    """The project's dependencies, by normalized distribution name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_normalize(req.name): req for req in map(Requirement, project["dependencies"])}


def _third_party_imports() -> dict[str, set[str]]:
    """``{dotted module: {tuner files}}`` of every import in tuner/**/*.py outside the standard library."""
    found: dict[str, set[str]] = {}
    for file in sorted((ROOT / "tuner").rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "tuner" and top not in sys.stdlib_module_names:
                    found.setdefault(name, set()).add(file.relative_to(ROOT).as_posix())
    return found


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The installed distributions that provide ``module`` (normalized names).

    A top-level name that several distributions share (the ``google`` namespace) is
    narrowed to those that ship the module's own subpackage (``google/protobuf``).
    """
    top = module.split(".")[0]
    candidates = _packages_distributions().get(top, [])
    if len(set(candidates)) > 1 and "." in module:
        sub = "/".join(module.split(".")[:2]) + "/"
        candidates = [d for d in candidates
                      if any(str(f).startswith(sub) for f in importlib.metadata.files(d) or [])] or candidates
    return {_normalize(d) for d in candidates}


def _uncovered(imports: dict[str, set[str]], declared: dict[str, Requirement]) -> list[str]:
    problems = []
    for module, files in sorted(imports.items()):
        dists = _distributions(module)
        if not dists & set(declared):
            problems.append(f"{module} (imported by {', '.join(sorted(files))}) comes from "
                            f"{sorted(dists) or 'no installed distribution'}, which pyproject.toml does not declare")
    return problems


def _extras() -> dict[str, Requirement]:
    """The optional dependencies of every extra (``pip install -e ".[dashboard]"``), by normalized name."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {_normalize(req.name): req for name, reqs in extras.items() if name != "test" for req in map(Requirement, reqs)}


def _module_level_imports() -> set[str]:
    """The third-party modules some tuner module imports at its top level (when it is imported)."""
    found = set()
    for file in sorted((ROOT / "tuner").rglob("*.py")):
        for node in ast.parse(file.read_text(), str(file)).body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
    return found


def test_every_package_tuner_imports_is_declared():
    """A dependency or an extra's (only inside the function that needs it, which names the extra when it is
    missing: `tuner dashboard`)."""
    imports = _third_party_imports()
    problems = _uncovered(imports, {**_declared(), **_extras()})
    assert not problems, "\n".join(problems)
    only_extras = {m for m in imports if not _distributions(m) & set(_declared())}
    assert only_extras == {"optuna_dashboard"}
    assert not only_extras & _module_level_imports(), "an extra's package imported when tuner's module is"


def test_packages_needed_indirectly_are_declared():
    declared = _declared()
    missing = [f"{name}: {why}" for name, why in INDIRECT.items() if _normalize(name) not in declared]
    assert not missing, "\n".join(missing)


def test_the_import_check_catches_an_undeclared_package():
    declared = {name: req for name, req in _declared().items() if name != "pyarrow"}
    problems = _uncovered({"pyarrow.fs": {"tuner/experiment/storage.py"}, "google.protobuf.struct_pb2": {"tuner/run/loggers.py"}},
                          declared)
    assert len(problems) == 1 and problems[0].startswith("pyarrow.fs (imported by tuner/experiment/storage.py)"), problems


def test_every_dependency_has_a_lower_bound_that_the_installed_version_meets():
    for _name, req in _declared().items():
        assert any(spec.operator in (">=", "==", "~=") for spec in req.specifier), f"{req}: no lower bound"
        installed = Version(importlib.metadata.version(req.name))
        assert req.specifier.contains(installed, prereleases=True), f"{req}: the installed {installed} is outside"


#: Lower bounds that an API tuner uses sets: the package, the first version with it, and what.
API_FLOORS = {
    "optuna": ("5.0", "Trial.set_constraint and create_trial(constraints=...): tuner/search/algorithms.py _OptunaSearch "
                      "(optuna/optuna#6754 and #6816, released in v5.0.0)"),
}


@pytest.mark.parametrize("package", sorted(API_FLOORS))
def test_the_lower_bound_has_the_api_tuner_uses(package):
    floor, what = API_FLOORS[package]
    req = _declared()[package]
    assert not req.specifier.contains(_just_below(floor), prereleases=True), \
        f"{req} allows a version before {floor}, which lacks {what}"


def _just_below(version: str) -> Version:
    """The last release before ``version`` that a lower bound could still admit (``4.99.99`` for ``5.0``)."""
    major, minor = Version(version).release[:2]
    return Version(f"{major}.{minor - 1}.99") if minor else Version(f"{major - 1}.99.99")


def test_ray_is_bound_to_the_minor_version_tuner_is_tested_with():
    """tuner reaches into Ray's internals (tests/test_ray_internals.py): a new minor Ray must be tested first."""
    ray = _declared()["ray"]
    pins = {Requirement(line).name: Requirement(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    tested = Version(next(iter(pins["ray"].specifier)).version)
    assert tested in ray.specifier
    assert Version(f"{tested.major}.{tested.minor + 1}.0") not in ray.specifier, f"{ray}: no upper bound"
    assert Version(f"{tested.major}.{tested.minor}.99") in ray.specifier


def test_constraints_pin_pytest_below_9_2_and_the_cpu_torch():
    """README "Setup": constraints.txt pins pytest below 9.2 (under 9.2.0 --dist loadgroup no longer keeps a
    module's runs on one worker) and torch==2.13.0 (the CPU wheel, not a multi-GB CUDA build)."""
    pins = {Requirement(line).name: Requirement(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    pytest_pin = Version(next(iter(pins["pytest"].specifier)).version)
    assert str(pins["pytest"].specifier).startswith("==") and pytest_pin < Version("9.2"), pins["pytest"]
    assert str(pins["torch"].specifier) == "==2.13.0", pins["torch"]


@pytest.mark.xdist_group("test_dependencies")
def test_xdist_keeps_a_group_on_one_worker(request):
    """Under `--dist loadgroup` (pyproject's addopts) a module marked xdist_group runs on one worker, so its
    module-scoped runs are made once: pytest-xdist does it by adding ``@<group>`` to each node id, which
    pytest 9.2.0's node ids no longer take (the suite then took 38 minutes instead of 21)."""
    if not getattr(request.config.option, "loadgroup", False):  # set in pytest-xdist's workers only
        pytest.skip("not run under pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith("@test_dependencies"), request.node.nodeid


@pytest.mark.slow  # a trivial one: as a slow test, it runs in one of the two lanes
def test_the_slow_tests_run_in_two_lanes_and_a_lanes_module_stays_whole(request):
    """Under `--dist loadgroup`, tests/conftest.py puts each slow test in one of two xdist groups (two at once
    at most, beside the short tests), and each module of ``WHOLE_MODULES_IN_A_LANE`` whole in one lane, so that
    its module-scoped fixture is built once. The groups must be set before pytest-xdist reads them into the node
    ids (the hook runs first); set after, no test had a lane and three slow tests ran at once again."""
    from tests.conftest import SLOW_LANES, WHOLE_MODULES_IN_A_LANE

    if not getattr(request.config.option, "loadgroup", False):  # set in pytest-xdist's workers only
        pytest.skip("not run under pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.rsplit("@", 1)[-1] in SLOW_LANES, request.node.nodeid
    lanes: dict[str, set[str]] = {}
    for item in request.session.items:
        if item.path.name in WHOLE_MODULES_IN_A_LANE:
            lanes.setdefault(item.path.name, set()).add(item.nodeid.rsplit("@", 1)[-1])
    assert all(len(names) == 1 and names <= set(SLOW_LANES) for names in lanes.values()), lanes


def test_ci_runs_the_readmes_install_and_test_commands():
    """.ci/run installs the project as the README's first command does and runs the README's test command
    (lint, type check, tests), word for word."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("```bash\n") + len("```bash\n"):]
    install, test = block[:block.index("```")].strip().splitlines()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert install.split(" && ")[0] in ci, install
    assert ci[-1] == test, (ci[-1], test)

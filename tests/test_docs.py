"""The documentation: the site builds strictly, its generated pages are current, and what README.md and
docs/**/*.md show is what tuner takes: each YAML spec validates, each ``tuner ...`` command line names a
command and options that exist.

Markers for a fenced ```yaml block, on the line right before its fence (blank lines between are skipped):

* none: the block is a whole spec. It is written to a file and validated in this process as
  ``tuner validate FILE --num-cpus 64 --num-gpus 0`` checks a spec before Ray starts: ``load_spec``, the
  trainable imported by name and checked (:func:`tuner.spec.resolve_trainable`, :func:`tuner.spec.check_trainable`;
  the working directory and ``sys.path`` hold the repository root, so ``trainable: examples.mnist:train``
  resolves), and the resources of one trial against that fixed machine (:func:`tuner.resources.sizing.check_fits`;
  not for a spec with ``ray.address``, whose cluster's resources apply). Left out as the machine's, not the spec's:
  the optional packages of ``reporting.wandb``/``mlflow``, a cluster's reachability, ``search.warm_start``'s
  earlier experiments. A command trial's spec (``trainable: {command: ...}``) has its program checked instead
  (:func:`tuner.spec.check_command`), the file written into a ``search_spaces/`` folder beside a link to the
  repository's ``examples/``, so that its script is found as from a shipped spec.
* ``<!-- spec: needs-gpu -->``: a whole spec that needs a GPU (``gpu: auto``, ``gpu_per_worker: 1`` ...),
  validated as above but on a machine of 8 GPUs (``--num-gpus 8``: Ray's logical GPUs, as tuner's own
  message for a GPU-less machine suggests), so that it passes on a machine without any.
* ``<!-- spec: part -->``: some top-level sections of a spec. They replace those sections of the main job
  (``search_spaces/mnist_asha.yaml``), and the result is validated as a whole spec; ``<!-- spec:
  part-needs-gpu -->`` as for needs-gpu. An error in the part names the page's line.
* ``<!-- spec: fragment -->``: a piece of a spec that does not stand on the main job (alternatives side by side,
  YAML that is no spec): it only has to parse as YAML.
* ``<!-- spec: invalid -->``: a deliberate mistake: ``tuner validate`` (a subprocess) must refuse it, exit 2.

A failure names the block as ``file:line`` (the fence's line) and, for a spec's error, the line of the
page that tuner's message points at.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.fixtures.paths import ROOT

#: One xdist worker runs the module, so that the site is built once (``built_site``).
pytestmark = pytest.mark.xdist_group("docs")

#: The pages checked: the README and every documentation page.
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
MARKERS = ("fragment", "invalid", "needs-gpu", "part", "part-needs-gpu")
#: The spec a ``part`` block's sections go into.
MAIN_JOB = ROOT / "search_spaces" / "mnist_asha.yaml"
#: The machine a spec is validated for (``--num-cpus``; ``--num-gpus`` 0, or 8 for a needs-gpu block).
NUM_CPUS, NUM_GPUS_FOR_GPU_SPECS = 64, 8

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")
_MARKER = re.compile(r"^<!--\s*spec:\s*(?P<kind>[\w-]+)\s*-->$")


@dataclass
class Block:
    """A fenced code block of a page."""

    page: str
    line: int  # the fence's line, 1-based
    lang: str
    text: str  # dedented by the fence's indent
    marker: str | None  # the <!-- spec: X --> comment right before the fence

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def read_page(page: str, text: str | None = None) -> tuple[list[Block], list[tuple[int, str]]]:
    """The fenced blocks of ``page`` (its file, or ``text``), and its lines outside them (``(line, text)``)."""
    lines = ((ROOT / page).read_text() if text is None else text).splitlines()
    blocks, prose = [], []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, ticks = len(opened["indent"]), opened["ticks"]
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(before)
        body = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(ticks) and set(lines[j].strip()) == {ticks[0]}):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
            j += 1
        blocks.append(Block(page, i + 1, opened["info"].lower(), "\n".join(body) + "\n",
                            marker["kind"] if marker else None))
        i = j + 1
    return blocks, prose


_READ = {page: read_page(page) for page in PAGES}
YAML_BLOCKS = [b for blocks, _ in _READ.values() for b in blocks if b.lang in ("yaml", "yml")]


# --------------------------------------------------------------------------- the site


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """``python -m mkdocs build --strict`` of the repository's site (a subprocess from the root): the process,
    and the site's folder."""
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return proc, site


def _nav_pages() -> list[str]:
    """Every page of mkdocs.yml's nav, as its path under docs/."""
    def walk(items):
        for item in items:
            for value in (item.values() if isinstance(item, dict) else [item]):
                yield from walk(value) if isinstance(value, list) else [value]

    return list(walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))


def _warning_lines(log: str, docs: Path = ROOT / "docs") -> list[str]:
    """mkdocs's warnings, each with the ``file:line`` of the link it names when it names one."""
    out = []
    for line in log.splitlines():
        if not line.startswith(("WARNING", "ERROR")):
            continue
        link = re.search(r"Doc file '([^']+)' contains a link '([^']+)'", line)
        if link:
            page = docs / link[1]
            found = [n for n, text in enumerate(page.read_text().splitlines(), 1) if f"]({link[2]}" in text]
            line = f"docs/{link[1]}:{found[0] if found else '?'}: {line}"
        out.append(line)
    return out


def test_site_builds_strictly(built_site):
    """mkdocs.yml builds with ``--strict``: no warning (a broken link or anchor, a nav entry without its page,
    a docstring mkdocstrings cannot parse)."""
    proc, site = built_site
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        _warning_lines(proc.stderr) or [proc.stderr[-3000:]])
    assert (site / "index.html").is_file()


def test_build_warnings_name_the_line(tmp_path):
    """A warning about a link names the page's line that holds it."""
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "a.md").write_text("# A\n\nSee [the image](img/x.png).\n")
    log = ("INFO    -  Building documentation\nWARNING -  Doc file 'guides/a.md' contains a link 'img/x.png', but "
           "the target 'guides/img/x.png' is not found among documentation files.\n")
    assert _warning_lines(log, tmp_path) == ["docs/guides/a.md:3: " + log.splitlines()[1]]


@pytest.mark.parametrize("page", _nav_pages())
def test_nav_page_is_built(built_site, page):
    """Every page of the nav is a page of the built site."""
    _, site = built_site
    html = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
    assert (ROOT / "docs" / page).is_file(), f"docs/{page} (in mkdocs.yml's nav) does not exist"
    assert html.is_file(), f"docs/{page} was not built ({html.relative_to(site)} missing)"


@pytest.mark.parametrize(("page", "shows"), [
    ("reference/spec", ["scheduler.grace_period", "param_space.&lt;name&gt;.low", "resources.gpu_auto.margin"]),
    ("reference/cli", ["tuner run", "--num-samples", "tuner jobs logs", "--resume-errored"]),
    ("reference/python-api", ["tuner.run.engine.tune_model", "TuneResult", "tuner.trial.report", "SpecError",
                              "DiskFullError", "load_spec"]),
    ("reference/experiment-folder", ["summary.json", "experiment_state-", "trial_timeout.txt"]),
])
def test_reference_pages_show_the_code(built_site, page, shows):
    """The reference pages are filled from the code: a field of a section of the spec, a command and its
    options, the API's functions and classes, an experiment folder's files."""
    _, site = built_site
    html = (site / page / "index.html").read_text()
    assert [text for text in shows if text not in html] == []
    assert "Sentinel.UNSET" not in html, "click's default sentinel shown as a default (mkdocs-click's table style)"
    roles = re.findall(r":(?:func|class|meth|mod|data|attr|exc):<code>[^<]*", html)
    assert roles == [], "docstring roles left as text (docs/hooks.py turns them into code)"


# --------------------------------------------------------------------------- the generated pages


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["docs/reference/spec.md", "docs/reference/experiment-folder.md"])
def test_generated_page_is_current(page):
    """The generated reference pages are what docs/gen_reference.py writes from the code now."""
    gen = _generator()
    make = {str(path): fn for path, fn in gen.PAGES.items()}[page]
    text = (ROOT / page).read_text()
    assert text.startswith("<!-- Generated by docs/gen_reference.py"), f"{page} does not say it is generated"
    assert text == make(), f"{page} is stale: run `python docs/gen_reference.py` and commit it"


def test_gen_reference_check_names_a_stale_page(tmp_path, capsys):
    """``docs/gen_reference.py --check`` exits 1 naming a page that differs from the code (a copy of the
    pages' folder with one line changed), 0 when the pages are current."""
    gen = _generator()
    pages = {path: fn() for path, fn in gen.PAGES.items()}
    gen.ROOT = tmp_path
    for path, text in pages.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert gen.main(["--check"]) == 0
    (tmp_path / gen.SPEC_PAGE).write_text(pages[gen.SPEC_PAGE].replace("grace_period", "grace"))
    assert gen.stale_pages() == [gen.SPEC_PAGE]
    capsys.readouterr()
    assert gen.main(["--check"]) == 1
    assert capsys.readouterr().err == f"{gen.SPEC_PAGE} is stale: run `python docs/gen_reference.py` and commit it\n"


# --------------------------------------------------------------------------- the YAML blocks


def _validate(path: Path, num_gpus: int) -> None:
    """What ``tuner validate PATH --num-cpus NUM_CPUS --num-gpus num_gpus`` checks before Ray starts (see the
    module docstring); raises its SpecError."""
    from tuner.resources.sizing import check_fits, local_resources
    from tuner.spec import check_command, check_trainable, load_spec, resolve_trainable

    spec = load_spec(path)
    if spec.command is not None:  # a command trial: its program found, as `tuner validate` checks it
        check_command(spec)
    else:
        check_trainable(spec, resolve_trainable(spec))
    if spec.ray.address is None:
        check_fits(spec, local_resources(NUM_CPUS, num_gpus))


def _on_page(message: str, path: Path, block: Block, offset: int = 0) -> str:
    """tuner's message with the temporary file's ``file:line`` replaced by the page's (the block's text starts
    at the file's line ``offset + 1``; a line above it is the main job's, as its own file names it)."""

    def where(match: re.Match) -> str:
        line = int(match[1])
        if line <= offset:
            return f"{MAIN_JOB.relative_to(ROOT)} (merged):{line}"
        return f"{block.page}:{block.line + line - offset}"

    return re.sub(re.escape(str(path)) + r":(\d+)", where, message)


def with_main_job(part: str) -> tuple[str, int]:
    """The main job's spec with the top-level sections that ``part`` has replaced by ``part``'s: the text, and
    the number of lines before ``part``'s first (the main job's top-level keys ``part`` defines are left out,
    each with its indented lines and comments)."""
    replaced = set(yaml.safe_load(part) or {})
    kept, skipping = [], False
    for line in MAIN_JOB.read_text().splitlines():
        key = re.match(r"^([A-Za-z_]\w*):", line)
        if key:
            skipping = key[1] in replaced
        elif line and not line.startswith((" ", "#")):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n" + part, len(kept)


def _spec_file(folder: Path, text: str) -> Path:
    """Where a block's spec is written: ``folder/spec.yaml``; a command trial's in ``folder/search_spaces/``
    beside a link to the repository's ``examples/``, so that its script is found as from a shipped spec
    (``command: [python, ../examples/train_script.py, ...]``)."""
    try:
        trainable = (yaml.safe_load(text) or {}).get("trainable")
    except (yaml.YAMLError, AttributeError):
        trainable = None
    if not isinstance(trainable, dict):
        return folder / "spec.yaml"
    (folder / "search_spaces").mkdir(exist_ok=True)
    if not (folder / "examples").exists():
        (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return folder / "search_spaces" / "spec.yaml"


def check_block(block: Block, folder: Path) -> str | None:
    """What is wrong with a ```yaml block, by its marker (see the module docstring), or None. The spec is
    written to ``folder/spec.yaml``."""
    from tuner.spec import SpecError

    if block.marker not in (None, *MARKERS):
        return f"{block.where}: unknown marker <!-- spec: {block.marker} --> (one of {', '.join(MARKERS)})"
    if block.marker == "fragment":
        try:
            yaml.safe_load(block.text)
        except yaml.YAMLError as err:
            return f"{block.where}: the fragment is not YAML: {err}"
        return None
    text, offset = with_main_job(block.text) if block.marker in ("part", "part-needs-gpu") else (block.text, 0)
    path = _spec_file(folder, text)
    path.write_text(text)
    if block.marker == "invalid":
        proc = subprocess.run([sys.executable, "-m", "tuner", "validate", str(path), "--num-cpus", str(NUM_CPUS),
                               "--num-gpus", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        if proc.returncode != 2:
            return (f"{block.where}: marked invalid, but `tuner validate` exited {proc.returncode}, not 2:\n"
                    f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        return None
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        with contextlib.chdir(ROOT):
            _validate(path, NUM_GPUS_FOR_GPU_SPECS if block.marker in ("needs-gpu", "part-needs-gpu") else 0)
    except SpecError as err:
        hint = ("" if block.marker in ("needs-gpu", "part-needs-gpu") or "GPU" not in str(err) else
                " (a spec for a GPU machine: mark it <!-- spec: needs-gpu --> or <!-- spec: part-needs-gpu -->)")
        what = "the main job with this part" if offset else "a valid spec"
        return f"{block.where}: not {what}{hint}: {_on_page(str(err), path, block, offset)}"
    return None


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.where for b in YAML_BLOCKS])
def test_yaml_block_is_a_valid_spec(block, tmp_path):
    """Each ```yaml block of the README and the docs is a spec tuner accepts, a fragment that parses, or a
    deliberate mistake that ``tuner validate`` refuses (the markers: see the module docstring)."""
    problem = check_block(block, tmp_path)
    assert problem is None, problem


def test_block_checker_catches_mistakes(tmp_path):
    """The block checker refuses a spec tuner refuses (naming the page's line), a GPU spec unmarked, a fragment
    that is no YAML, a mistake that tuner takes; it takes a good spec, a marked GPU spec and a refused mistake."""
    good = "trainable: examples.mnist:train\nmetric: val_loss\nmode: min\nparam_space:\n  lr: 0.1\n"
    bad = good + "scheduler: {type: asha, grace_period: 0}\n"
    gpu = good + "resources: {gpu: auto}\n"

    def check(text, marker=None):
        return check_block(Block("docs/x.md", 10, "yaml", text, marker), tmp_path)

    assert check(good) is None
    assert check(bad).startswith("docs/x.md:10: not a valid spec: docs/x.md:16:")
    assert "mark it <!-- spec: needs-gpu -->" in check(gpu)
    assert check(gpu, "needs-gpu") is None
    assert check("a: [1,", "fragment").startswith("docs/x.md:10: the fragment is not YAML")
    assert check("stop: {training_iteration: 3}\n", "fragment") is None
    assert check(bad, "invalid") is None
    assert check("scheduler: {type: asha, max_t: 4}\n", "part") is None
    broken = check("metric: val_loss\nscheduler: {type: asha, grace_period: 0}\n", "part")
    assert broken.startswith("docs/x.md:10: not the main job with this part: docs/x.md:12:"), broken
    assert check("resources: {gpu: auto}\n", "part-needs-gpu") is None
    assert "part-needs-gpu" in check("resources: {gpu: auto}\n", "part")
    assert "marked invalid, but `tuner validate` exited 0" in check(good, "invalid")
    assert "unknown marker" in check(good, "gpu")
    script = ("trainable: {command: [python, ../examples/train_script.py, --lr, '{lr}']}\nmetric: val_accuracy\n"
              "mode: max\nparam_space:\n  lr: 0.1\n")  # a command trial's script is found as from search_spaces/
    assert check(script) is None
    assert "script '../examples/no_such.py' not found" in check(script.replace("train_script", "no_such"))
    assert "placeholder {width} names no" in check("trainable: {command: [python, -c, pass, '{width}']}\n", "part")


def test_yaml_blocks_are_found():
    """The blocks are found (the README and the guides show specs), and a marker is read from the line before
    a fence."""
    assert len(YAML_BLOCKS) >= 5
    sample = "Some text.\n\n<!-- spec: fragment -->\n\n```yaml\nstop: {training_iteration: 3}\n```\n"
    (block,), _ = read_page("docs/sample.md", sample)
    assert (block.line, block.lang, block.marker, block.text) == (5, "yaml", "fragment",
                                                                  "stop: {training_iteration: 3}\n")


# --------------------------------------------------------------------------- the command lines

_SEPARATORS = re.compile(r"\s+(?:&&|\|\||\||;)\s+|;\s*$|\s+&\s*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")


def _placeholder(token: str) -> bool:
    """SPEC, <spec.yaml>, [PATH]..., {run,validate}, ...: a stand-in, not a literal command name."""
    return bool(re.search(r"[<>\[\]{}…]|\.\.\.", token)) or (token.upper() == token and any(c.isalpha()
                                                                                            for c in token))


def tuner_args(command: str) -> list[str] | None:
    """The arguments of a ``tuner ...`` (or ``python -m tuner ...``) command line, or None for another."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote: still check its words
        tokens = command.split()
    while tokens and (tokens[0] in ("$", ">") or _ENV.match(tokens[0])):
        tokens = tokens[1:]
    if tokens[:1] == ["tuner"]:
        return tokens[1:]
    if len(tokens) >= 3 and _PYTHON.match(tokens[0]) and tokens[1:3] == ["-m", "tuner"]:
        return tokens[3:]
    return None


def check_command(args: list[str]) -> list[str]:
    """What is wrong with ``tuner ARGS``: a command that does not exist, an option the command lacks."""
    import click

    from tuner.cli import cli

    problems = []
    command: click.Command = cli
    words = ["tuner"]
    args = list(args)
    while args:
        token = args.pop(0)
        if token == "--":
            break
        if re.match(r"^\d*[<>]", token):  # a redirection: the rest is the shell's
            break
        if token.startswith("-") and len(token) > 1:
            name = token.split("=", 1)[0]
            known = {"-h", "--help"} | {opt for param in command.params if isinstance(param, click.Option)
                                        for opt in (*param.opts, *param.secondary_opts)}
            if name not in known:
                problems.append(f"{' '.join(words)} {name}: no such option")
            continue
        if isinstance(command, click.Group) and not _placeholder(token):
            names = token.split("|")  # run|validate: each of them
            missing = [n for n in names if command.get_command(click.Context(command), n) is None]
            if missing:
                problems.append(f"{' '.join(words)} {token}: no such command")
                break
            if len(names) > 1:  # alternatives: their options are not checked
                break
            command = command.get_command(click.Context(command), token)
            words.append(token)
        elif isinstance(command, click.Group):
            break  # tuner COMMAND ...: a placeholder
    return problems


def command_lines(page: str, text: str | None = None) -> list[tuple[int, str]]:
    """``(line, command)`` of every ``tuner ...`` command line of ``page`` (its file, or ``text``): in
    ```bash/```console/```sh blocks (a console block's ``$`` lines only, when it has any; continued lines
    joined) and in inline code spans."""
    blocks, prose = _READ[page] if text is None else read_page(page, text)
    found = []
    for block in blocks:
        if block.lang not in ("bash", "console", "sh", "shell", "shell-session", "zsh"):
            continue
        lines = block.text.splitlines()
        prompted = block.lang != "bash" and any(line.lstrip().startswith("$ ") for line in lines)
        n = 0
        while n < len(lines):
            start, text = n, lines[n]
            while text.endswith("\\") and n + 1 < len(lines):
                n += 1
                text = text[:-1] + " " + lines[n].strip()
            n += 1
            if prompted and not text.lstrip().startswith("$ "):
                continue
            for part in _SEPARATORS.split(text.strip()):
                found.append((block.line + 1 + start, part))
    for number, text in prose:
        for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text):
            if re.match(r"^(?:\S*python\S*\s+-m\s+)?tuner\s", span.strip() + " "):
                found.append((number, span))
    return [(n, c) for n, c in found if tuner_args(c) is not None]


@pytest.mark.parametrize("page", PAGES)
def test_tuner_commands_exist(page):
    """Every ``tuner <command> ...`` of the page names a command tuner has, and only options that command has
    (placeholders such as SPEC or <spec.yaml> stand for any argument)."""
    problems = [f"{page}:{n}: {problem}" for n, command in command_lines(page)
                for problem in check_command(tuner_args(command) or [])]
    assert problems == [], "\n" + "\n".join(problems)


def test_command_checker_catches_mistakes():
    """The checker refuses an unknown command and an unknown option, and takes real ones and placeholders."""
    assert check_command(["run", "SPEC", "--bogus"]) == ["tuner run --bogus: no such option"]
    assert check_command(["frobnicate", "x.yaml"]) == ["tuner frobnicate: no such command"]
    assert check_command(["jobs", "logs", "ID", "--follow", "--address", "http://h:8265"]) == []
    assert check_command(["run", "<spec.yaml>", "--num-samples=4", "--set", "a.b=1", "-h"]) == []
    assert check_command(["COMMAND", "--help"]) == []
    assert check_command(["run|validate|submit", "SPEC"]) == []
    assert tuner_args("$ TUNER_DEBUG=1 python -m tuner validate s.yaml  # note") == ["validate", "s.yaml"]
    assert tuner_args("pip install tuner") is None


def test_command_lines_are_found():
    """Command lines are read from shell blocks (continued lines joined, a console block's prompts only, each
    command of a chain) and inline code spans, each with its line."""
    sample = ("Run `tuner run SPEC --bogus` or `tuner.trial.report`.\n\n"
              "```bash\ntuner validate s.yaml \\\n  --num-cpus 2 && python -m tuner report runs/x\n```\n\n"
              "```console\n$ tuner list\ntuner: error: not a prompt\n```\n")
    assert command_lines("docs/x.md", sample) == [
        (4, "tuner validate s.yaml  --num-cpus 2"), (4, "python -m tuner report runs/x"), (9, "$ tuner list"),
        (1, "tuner run SPEC --bogus")]

"""Every `snakemake` command that README.md and docs/*.md show in a fenced code block plans: each is dry-run (`-n`
added, everything else as written, through bash so that brace expansion and quoting work as for the reader) in one
clean copy of the workflow, where the files that are the reader's own (data folders, overlays the docs create with
`printf`, a reference set imported from another machine) are made first. And every relative link and every repository
path the pages name exists."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_workflow
from watched import run_watched

pytestmark = pytest.mark.workflow

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)

# Documented commands that are not a plan, each with the reason.
NOT_PLANNED = {
    # builds the HTML report from the outputs of a finished run; with none there it stops ("marked for report but
    # does not exist"): tests/test_report_page.py runs it on the tiny end-to-end run and reads the page
    "snakemake --report report.html": "needs a finished run: run on one in tests/test_report_page.py",
}

# What the reader has and this checkout does not: their own data folders (empty ones plan: the preparation job reads
# them), and reference sets exported on other machines (docs/cluster.md imports a100 and h100).
READERS_FOLDERS = ("data/wholehead/image", "data/wholehead/mask", "data/brats")
IMPORTED_SETS = ("a100", "h100")


def fenced_lines(page: Path) -> list[str]:
    """The lines of the page's fenced code blocks, backslash-continued lines joined, comments dropped."""
    lines = []
    for block in FENCE.findall(page.read_text()):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"(^|\s)#\s.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def documented_commands() -> dict[str, list[str]]:
    """Each distinct snakemake command, with the pages that show it; `a && b` and `a | b` give their parts."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for line in fenced_lines(page):
            for part in re.split(r"\s*(?:&&|\|)\s*", line):
                if part.startswith("snakemake "):
                    found.setdefault(part, []).append(page.relative_to(REPO).as_posix())
    return found


def created_files() -> dict[str, str]:
    """The overlays the pages write with `printf '...' > FILE`, by name, run as shown."""
    made: dict[str, str] = {}
    for page in PAGES:
        for line in fenced_lines(page):
            match = re.fullmatch(r"printf (.+) > (\S+)", line)
            if match:
                assert made.get(match[2], line) == line, f"{match[2]} is written twice, differently: rename one"
                made[match[2]] = line
    return made


COMMANDS = documented_commands()


def test_the_pages_show_commands_and_repeat_few():
    """The test finds the commands (the extraction works), and the pages keep to a handful of distinct ones."""
    assert "snakemake --cores 1 paper/figures/all" in COMMANDS
    assert len(COMMANDS) <= 24, sorted(COMMANDS)


def shell_words(command: str, cwd: Path) -> list[str]:
    """The words bash makes of `command` (quotes removed, braces expanded): the arguments the command runs with.
    Snakemake then runs with them as the other tests run it (its imports already made), not in a shell of its own."""
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], cwd=cwd, capture_output=True, text=True,
                           check=True).stdout
    return words.split("\0")[:-1]


@pytest.fixture(scope="module")
def readers_checkout(tmp_path_factory) -> Path:
    copy = copy_workflow(tmp_path_factory.mktemp("documented") / "wf")
    for folder in READERS_FOLDERS:
        (copy / folder).mkdir(parents=True, exist_ok=True)
    for label in IMPORTED_SETS:  # an exported set: the shipped one stands in for it
        (copy / "data/reference/wholehead" / label).symlink_to(REPO / "data/reference/wholehead/h200")
    for line in created_files().values():
        subprocess.run(["bash", "-c", line], cwd=copy, check=True)
    return copy


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=lambda command: command[10:80])
def test_documented_command_plans(command, readers_checkout):
    if command in NOT_PLANNED:
        pytest.skip(NOT_PLANNED[command])
    assert not re.search(r"<[a-z]|\.\.\.|NAME|GROUP", command), \
        f"{command} (in {COMMANDS[command]}) holds a placeholder: write it concretely, or list it in NOT_PLANNED"
    done = run_watched([sys.executable, "-m", "snakemake", "-n", *shell_words(command, readers_checkout)[1:]],
                       readers_checkout)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and ("This was a dry-run" in output or "Nothing to be done" in output), \
        f"{command} (in {', '.join(COMMANDS[command])}) does not plan:\n{output[-3000:]}"


# -- links and paths ---------------------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
# Top-level entries of the repository; a word in backticks that starts with one of them is a path to check.
TRACKED = ("Snakefile", "config.yaml", "config/", "data/", "docs/", "envs/", "profiles/", "tests/", "workflow/",
           ".ci/", "pyproject.toml", "README.md")
# Paths that a run, or the reader, makes: named in the pages, not in the checkout.
MADE = ("data/wholehead", "data/brats", "data/reference/wholehead/a100", "data/reference/wholehead/h100",
        "data/reference/wholehead/l40s", "profiles/slurm-l40s", "profiles/slurm-a100-mysite",
        "workflow/report/fig12_something.rst", "workflow/scripts/reporting/outputs/fig12_something.py")


def named_paths(page: Path):
    """(what the page wrote, the path it resolves to): relative links, and repository paths in inline code."""
    text = page.read_text()
    for target in LINK.findall(text):
        if not re.match(r"[a-z]+:|#", target):
            yield target, (page.parent / target.split("#", 1)[0]).resolve()
    for code in CODE.findall(FENCE.sub("", text)):
        for word in code.split():
            word = word.strip(".,:;()'\"")
            if word.startswith(TRACKED) and not re.search(r"[<>{}*$\[\]]|\.\.\.", word) \
                    and not word.startswith(MADE):
                yield word, REPO / word


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub writes them."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_link_and_path_exists(page):
    missing = sorted({written for written, path in named_paths(page) if not path.exists()})
    assert not missing, f"{page.relative_to(REPO)} names what does not exist: {missing}"
    for target in LINK.findall(page.read_text()):
        if "#" in target and not re.match(r"[a-z]+:", target):
            linked, anchor = target.split("#", 1)
            linked_page = (page.parent / linked).resolve() if linked else page
            assert anchor in anchors(linked_page), f"{page.relative_to(REPO)}: no heading for the link {target}"

"""The README and the documentation site: every example runs, the site builds strictly, and a real browser finds
no broken link or image.

Fenced blocks are run by their language: ```python blocks of a page in order, in one namespace (in the folder the
page's ``mkdir -p`` lines make); ```bash blocks by :mod:`docs_pages`, the whole documentation typed in order, twice,
in one folder, on a fresh home (a marked test: ``python -m pytest -m docs``); ```py and ```shell
blocks are shown only (installs, long training runs), their commands checked to exist. Examples run in a temporary
folder where ``examples/`` is the repository's.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def commands(block: str) -> list[str]:
    """The block's command lines, backslash continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


def page_folders(page: Path) -> list[str]:
    """The folders a page's ```bash blocks make (``mkdir -p DIR``): where its examples keep their files."""
    return [word for block in blocks(page, "bash") for line in commands(block)
            if line.startswith("mkdir -p ") for word in line.split()[2:]]  # fmt: skip


def run_env() -> dict[str, str]:
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


NEEDS_TORCH = re.compile(r"hdp-plan\s+(train|compare|flower)\b|hdp_planner_(train|flower)")


def torch_guard(code: str) -> None:
    """Skip examples that train when torch is not installed, as every other torch test does."""
    if NEEDS_TORCH.search(code):
        pytest.importorskip("torch")


PYTHON_PAGES = [p for p in PAGES if blocks(p, "python")]
BASH_PAGES = [p for p in PAGES if blocks(p, "bash")]


def test_every_page_is_checked_somewhere() -> None:
    """The README and the getting-started page carry runnable examples (a guard against a renamed fence)."""
    assert ROOT / "README.md" in PYTHON_PAGES and ROOT / "README.md" in BASH_PAGES
    assert ROOT / "docs" / "getting-started.md" in PYTHON_PAGES


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=page_id)
def test_python_examples_run(page: Path, workdir: Path) -> None:
    torch_guard("\n".join(blocks(page, "python")))
    for folder in page_folders(page):
        (workdir / folder).mkdir(parents=True, exist_ok=True)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for number, code in enumerate(blocks(page, "python"), 1):
        exec(compile(code, f"{page_id(page)} python block {number}", "exec"), namespace)


@pytest.mark.docs  # the whole documentation, twice: about 11 minutes on 2 cores; CI runs it (python -m pytest -m docs)
def test_the_documentation_typed_in_order_twice_in_one_folder_on_a_fresh_home(tmp_path: Path) -> None:
    """README, getting started, the tutorials in the README's order, then the other pages: every ```bash line and
    every page's ```python blocks, in one folder, on a fresh home, all of it twice (:mod:`docs_pages`). No refusal
    the page does not show, no traceback, no process or temporary folder left behind, no simulated client in the
    default privacy ledger, and every number a page shows a command print is the number it prints."""
    pytest.importorskip("torch")
    pytest.importorskip("flwr")
    import docs_pages

    lines: list[str] = []
    results = docs_pages.run_pages(tmp_path, log=lines.append)
    problems = [f"{r.step.page.relative_to(ROOT)}: `{r.step.code[:120]}`: " + "\n".join(r.problems)
                for r in results if r.problems]  # fmt: skip
    assert not problems, "\n\n".join(problems[:10]) + "\n\n" + "\n".join(lines)


def test_every_page_of_the_sequence_keeps_its_files_in_a_folder_of_its_own() -> None:
    """Each tutorial writes only into its own folder (the README into the working folder itself), so pages typed one
    after another never meet each other's files."""
    import docs_pages

    owners: dict[str, Path] = {}
    for page in docs_pages.pages_in_order()[1:]:
        folders = page_folders(page)
        assert len(folders) == 1, f"{page_id(page)} makes {folders}: one folder of its own"
        assert folders[0] not in owners, f"{page_id(page)} and {page_id(owners[folders[0]])} share {folders[0]}/"
        owners[folders[0]] = page
        for step in docs_pages.steps(page):
            if step.kind == "bash" and step.code.startswith("hdp-plan "):
                written = re.findall(r"(?:-o|--out|--csv|--plot|--output)\s+([^-\s]\S*)", step.code)
                outside = [w for w in written if not w.startswith(f"{folders[0]}/")]
                assert not outside, f"{page_id(page)}: `{step.code}` writes {outside} outside {folders[0]}/"


def test_no_shown_command_uses_an_unknown_subcommand() -> None:
    """Commands shown but not run (```shell) still name real ``hdp-plan`` subcommands."""
    from hdp_planner_cli.app import COMMANDS, app

    known = {name for name, *_ in COMMANDS} | {group.name for group in app.registered_groups}  # hdp-plan ledger …
    for page in PAGES:
        for block in blocks(page, "shell"):
            for line in commands(block):
                for sub in re.findall(r"hdp-plan\s+([a-z][\w-]*)", line):
                    assert sub in known, f"{page_id(page)}: unknown command `hdp-plan {sub}` in `{line}`"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = dict(run_env(), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return out


def test_site_builds_with_every_page(site: Path) -> None:
    for page in (ROOT / "docs").rglob("*.md"):
        rel = page.relative_to(ROOT / "docs").with_suffix("")
        target = site / (rel.parent if rel.name == "index" else rel) / "index.html"
        assert target.exists(), f"{page_id(page)} was not built"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "hdp-plan solve" in cli and "--eps E1,E2,…" in cli and "\\[" not in cli
    assert "calibrate_sigma" in (site / "reference" / "api" / "index.html").read_text()


def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the docs extra)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("no Chromium: apt-get install chromium")
    return sync_api, executable


def test_site_in_a_browser_has_no_broken_link_or_image(site: Path) -> None:
    sync_api, executable = browser()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("index.html"))
    problems: list[str] = []

    def failed(request) -> bool:
        """A request of the site that failed, not one aborted because the next page was opened."""
        return request.url.startswith(base) and "ERR_ABORTED" not in (request.failure or "")

    try:
        with sync_api.sync_playwright() as pw:
            chromium = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            tab = chromium.new_page()
            tab.on("response", lambda r: r.status >= 400 and problems.append(f"{r.url}: HTTP {r.status}"))
            tab.on("requestfailed", lambda r: failed(r) and problems.append(f"{r.url}: {r.failure}"))
            for rel in pages:
                url = urljoin(base, rel.removesuffix("index.html"))
                tab.goto(url, wait_until="load")
                broken = tab.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                                      ".map(i => i.src)")  # fmt: skip
                problems += [f"{rel}: image {src} did not load" for src in broken]
                for href in tab.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)"):
                    link = urlparse(href)
                    if not href.startswith(base):
                        continue
                    path = site / link.path.removeprefix("/")
                    if path.is_dir():
                        path = path / "index.html"
                    if not path.exists():
                        problems.append(f"{rel}: link to {link.path} (no such page)")
                    elif link.fragment and path.suffix == ".html":
                        if f'id="{link.fragment}"' not in path.read_text(errors="replace"):
                            problems.append(f"{rel}: link to {link.path}#{link.fragment} (no such anchor)")
            chromium.close()
    finally:
        server.shutdown()
    assert not problems, "\n".join(sorted(set(problems))[:40])

"""The documentation typed in order, as a new user would: the README, then getting started, then the tutorials in the
order the README lists them (then any other page with ```bash blocks), every ```bash line and every page's ```python
blocks, in one folder, on a fresh home.

What a page shows a command print (a ```text block right after the ```bash block whose last command prints it) comes
from the commands, by this script, never by hand:

    python tests/docs_pages.py --update    # run the pages twice in fresh folders and rewrite every output they show
    python tests/docs_pages.py --check     # run them twice in one folder, as the documentation's test does

``--update`` writes what the first run printed, every number that differed between the two runs (an accuracy under
secure noise, a time) as "…". ``--check`` fails on a refusal the page does not show, a traceback, a process or
temporary folder left behind, a simulated client in the default privacy ledger, or a printed number that differs
from the page's. A line whose comment says ``refused when run again`` may be refused (exit status 2, one line) the
second time; a ```text block that starts with ``error:`` shows a refusal, expected every time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*\n", re.S | re.M)
NUMBER = re.compile(r"…|(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
AGAIN = "refused when run again"
TIMEOUT = 1800


def pages_in_order() -> list[Path]:
    """The README, getting started, then the tutorials as the README's list of them orders them."""
    readme = (ROOT / "README.md").read_text()
    tutorials = next(line for line in readme.splitlines() if line.startswith("- Tutorials:"))
    start = readme.index(tutorials)
    end = readme.index("\n- Concepts:", start)
    links = re.findall(r"\]\((docs/tutorials/[\w-]+\.md)\)", readme[start:end])
    ordered = [ROOT / "README.md", ROOT / "docs" / "getting-started.md", *(ROOT / link for link in links)]
    others = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p not in ordered and "```bash" in p.read_text()]
    return ordered + others


@dataclass
class Step:
    """One thing the user types: a bash line, or a page's Python blocks; ``shown`` the output the page shows for it
    (with the span of its ```text block in the page), ``again`` whether it may be refused the second time."""

    page: Path
    kind: str  # "bash" | "python"
    code: str
    shown: str | None = None
    span: tuple[int, int] | None = None
    again: bool = False


def commands(block: str) -> list[str]:
    """The block's command lines, backslash continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def steps(page: Path) -> list[Step]:
    """The page's bash lines in order, its Python blocks as one step where the first of them stands, and the output
    each ```text block that follows a ```bash block shows for that block's last line."""
    text = page.read_text()
    found: list[Step] = []
    python: Step | None = None
    blocks = list(FENCE.finditer(text))
    for i, block in enumerate(blocks):
        lang, body = block.group(1), block.group(2)
        if lang == "python":
            if python is None:
                python = Step(page, "python", body)
                found.append(python)
            else:
                python.code += "\n" + body
        elif lang == "bash":
            lines = commands(body)
            found += [Step(page, "bash", line, again=AGAIN in line) for line in lines]
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            if after is not None and after.group(1) == "text" and not text[block.end() : after.start()].strip():
                found[-1].shown, found[-1].span = after.group(2), (after.start(2), after.end(2))
    return found


@dataclass
class Result:
    step: Step
    code: int
    output: str
    seconds: float
    problems: list[str] = field(default_factory=list)


class Session:
    """A fresh machine for the pages: one working folder (``examples/`` the repository's), a fresh home, a private
    temporary folder, and a mark in every process's environment to find any left running."""

    def __init__(self, base: Path) -> None:
        self.folder, self.home = base / "work", base / "home"
        for path in (self.folder, self.home):
            path.mkdir(parents=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="hdp-t", dir="/tmp"))  # short: Ray's sockets live below it
        (self.folder / "examples").symlink_to(ROOT / "examples")
        self.mark = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k not in ("XDG_DATA_HOME", "HDP_PLANNER_LEDGER", "FLWR_HOME")}
        env.update(HOME=str(self.home), TMPDIR=str(self.tmp), MPLBACKEND="Agg", COLUMNS="80", HDP_DOCS_RUN=self.mark,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))  # fmt: skip
        self.env = env

    def run(self, step: Step) -> Result:
        if step.kind == "python":
            args = [sys.executable, "-c", step.code]
        else:
            args = ["bash", "-c", step.code]
        start = time.monotonic()
        proc = subprocess.Popen(args, cwd=self.folder, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            output += f"\n(timed out after {TIMEOUT} s)"
        return Result(step, proc.returncode, output, time.monotonic() - start)

    def left_running(self) -> list[str]:
        """Processes with this session's mark in their environment (``pid command``), none but this script's own."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if f"HDP_DOCS_RUN={self.mark}".encode() in (entry / "environ").read_bytes():
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name} {command[:120]}")
            except OSError:
                continue
        return found

    def stop_left(self) -> None:
        for line in self.left_running():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def temporary(self) -> list[str]:
        """What is left in the private temporary folder (caches aside)."""
        return sorted(str(p) for p in self.tmp.iterdir() if not p.name.startswith("torchinductor"))

    def simulated_in_default_ledger(self) -> list[str]:
        """The runs of the default privacy ledger that hold a simulation's clients (ids of a plan's default mapping)."""
        ledger = self.home / ".local" / "share" / "hdp-planner" / "ledger.sqlite"
        if not ledger.exists():
            return []
        from hdp_planner.ledger.store import Ledger

        runs = Ledger(str(ledger), create=False).runs()
        return [f"{r.label} ({r.federation})" for r in runs if r.simulated is not False]


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def numbers_differ(shown: str, printed: str) -> str | None:
    """Where the numbers a page shows and those a command printed part ("…" stands for any number), or None."""
    want, got = numbers(shown), numbers(printed)
    if len(want) != len(got):
        return f"the page shows {len(want)} numbers, the command printed {len(got)}"
    for i, (w, g) in enumerate(zip(want, got)):
        if w != "…" and w != g:
            return f"number {i + 1}: the page shows {w}, the command printed {g}"
    return None


def check_step(result: Result, session: Session, attempt: int) -> None:
    """Fill ``result.problems``: a refusal the page does not show, a traceback, a process or temporary folder left."""
    step, out = result.step, result.output
    refusal = (step.shown or "").lstrip().startswith("error:")
    allowed = {0} if not refusal else {2}
    if attempt == 2 and step.again:
        allowed |= {2}
    if result.code not in allowed:
        result.problems.append(f"exit status {result.code} (the page shows {sorted(allowed)}): {out.strip()[-600:]}")
    if "Traceback (most recent call last)" in out:
        result.problems.append(f"a traceback: {out.strip()[-600:]}")
    left = session.left_running()
    if left:
        result.problems.append("processes left running: " + "; ".join(left[:5]))
        session.stop_left()
    temp = session.temporary()
    if temp:
        result.problems.append("temporary folders left: " + ", ".join(temp[:5]))
        for name in temp:
            shutil.rmtree(name, ignore_errors=True)
    if attempt == 1 and step.shown is not None:
        differ = numbers_differ(step.shown, out)
        if differ:
            result.problems.append(f"{differ}\n--- the page shows:\n{step.shown}--- printed:\n{out}")


def run_pages(base: Path, *, attempts: int = 2, pages: list[Path] | None = None, log=print) -> list[Result]:
    """Every step of ``pages`` (all, in order) ``attempts`` times in one session; the results with their problems,
    and a last one for the default ledger if it holds a simulated client."""
    session = Session(base)
    results: list[Result] = []
    for attempt in range(1, attempts + 1):
        for page in pages or pages_in_order():
            for step in steps(page):
                result = session.run(step)
                check_step(result, session, attempt)
                results.append(result)
                what = step.code if step.kind == "bash" else "(python blocks)"
                log(f"[{attempt}] {page.relative_to(ROOT)} {result.seconds:6.1f} s  {what[:90]}"
                    + ("" if not result.problems else "  PROBLEM"))  # fmt: skip
    shutil.rmtree(session.tmp, ignore_errors=True)
    simulated = session.simulated_in_default_ledger()
    if simulated:
        last = Result(Step(ROOT / "README.md", "ledger", "default ledger"), 0, "", 0.0)
        last.problems.append("the default privacy ledger holds simulated clients: " + ", ".join(simulated[:5]))
        results.append(last)
    return results


def masked(first: str, second: str) -> str:
    """``first`` with every number that ``second`` prints differently (the same count of numbers) as "…"."""
    a, b = numbers(first), numbers(second)
    if len(a) != len(b):
        return first
    pieces, last, i = [], 0, 0
    for match in NUMBER.finditer(first):
        pieces.append(first[last : match.start()])
        pieces.append(match.group() if a[i] == b[i] else "…")
        last, i = match.end(), i + 1
    return "".join(pieces) + first[last:]


def update(base: Path, pages: list[Path] | None = None, log=print) -> list[Path]:
    """Run the pages (all, or ``pages``: each tutorial keeps to its own folder) in two fresh sessions and rewrite every
    ```text block after a ```bash block with what its last line printed the first time, numbers that differed as
    "…"; returns the pages changed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # two fresh sessions at once
        first, second = pool.map(lambda name: run_pages(base / name, attempts=1, pages=pages, log=log), ("a", "b"))
    edits: dict[Path, list[tuple[tuple[int, int], str]]] = {}
    for a, b in zip(first, second):
        if a.step.span is not None:
            edits.setdefault(a.step.page, []).append((a.step.span, masked(a.output, b.output)))
    changed = []
    for page, spans in edits.items():
        text = page.read_text()
        for (start, end), output in sorted(spans, reverse=True):
            text = text[:start] + output.rstrip("\n") + "\n" + text[end:]
        if text != page.read_text():
            page.write_text(text)
            changed.append(page)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--update", action="store_true", help="rewrite the outputs the pages show")
    action.add_argument("--check", action="store_true", help="run the pages twice in one folder and check them")
    parser.add_argument("pages", nargs="*", type=Path, help="only these pages, in this order [every page, in order]")
    args = parser.parse_args()
    pages = [page.resolve() for page in args.pages] or None
    with tempfile.TemporaryDirectory(prefix="hdp-docs-") as base:
        if args.update:
            for page in update(Path(base), pages):
                print(f"updated {page.relative_to(ROOT)}")
            return 0
        problems = [r for r in run_pages(Path(base), pages=pages) if r.problems]
    for r in problems:
        print(f"{r.step.page.relative_to(ROOT)}: `{r.step.code[:100]}`: " + "\n".join(r.problems), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

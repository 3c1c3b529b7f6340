"""MkDocs hook: replace ``<!-- results: PATTERN -->`` in a page by the result files
``benchmarks/results/PATTERN.json`` rendered as Markdown (a glob pattern such as ``bench_*`` renders every match)."""

from __future__ import annotations

import re
from pathlib import Path

from hdp_planner.report.results import RESULTS_DIR, read_result, render_result

MARKER = re.compile(r"^<!-- results: (\S+) -->$", re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def render(match: re.Match[str]) -> str:
        paths = sorted(Path(RESULTS_DIR).glob(f"{match.group(1)}.json"))
        if not paths:
            raise ValueError(f"{page.file.src_path}: no result file matches {match.group(1)}.json")
        return "\n".join(render_result(read_result(p)) for p in paths)

    return MARKER.sub(render, markdown)

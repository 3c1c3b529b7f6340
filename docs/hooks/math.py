"""MkDocs hook: math set with KaTeX from the copy the system installs (Debian's ``libjs-katex``), served by the site
itself, so that a page never fetches anything from elsewhere. Pages write inline math as ``\\( … \\)`` and display math
as ``\\[ … \\]`` (``pymdownx.arithmatex``, generic mode); a site built where KaTeX is not installed shows that TeX."""

from __future__ import annotations

import shutil
from pathlib import Path

KATEX = Path("/usr/share/javascript/katex")
"""Where ``apt-get install libjs-katex`` puts KaTeX (its script, style sheet, fonts and the auto-render extension)."""

SITE_COPY = "assets/katex"
FILES = ("katex.min.css", "katex.min.js", "contrib/auto-render.js")


def on_config(config):
    if all((KATEX / name).is_file() for name in FILES):
        config.extra_css.append(f"{SITE_COPY}/katex.min.css")
        config.extra_javascript.append(f"{SITE_COPY}/katex.min.js")
        config.extra_javascript.append(f"{SITE_COPY}/contrib/auto-render.js")
        config.extra_javascript.append("assets/math.js")
    return config


def on_post_build(config) -> None:
    if all((KATEX / name).is_file() for name in FILES):
        target = Path(config.site_dir) / SITE_COPY
        for name in (*FILES, "fonts"):
            source, copy = KATEX / name, target / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, copy, dirs_exist_ok=True)
            else:
                shutil.copy2(source, copy)

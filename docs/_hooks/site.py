"""MkDocs hooks for the Cacheplane documentation site (``mkdocs.yml``: ``hooks``).

Two jobs, both so that ``mkdocs build --strict`` fails on a stale page:

- **Source links.** Pages point at the code and, above all, at the test that proves a
  claim, with ordinary relative links (``[tests/caches/test_api.py](../tests/caches/test_api.py)``)
  that also work when the Markdown is read in the repository. A link that leaves the docs
  folder must name a file that exists in the repository (otherwise a warning, which strict
  mode turns into a failure); the file is published under ``source/`` in the site and the
  link rewritten to it.
- **Benchmark tables.** ``<!-- RESULT name -->`` in a page becomes a table of the
  ``key=value`` pairs of ``bench/results/<name>.txt``: the benchmark's latest ``RESULT``
  line, pasted there by whoever ran it. A missing or malformed file is a warning.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

log = logging.getLogger("mkdocs.plugins.cacheplane")

_LINK = re.compile(r"\]\((?P<target>\.\./[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
_RESULT = re.compile(r"<!-- RESULT (?P<name>[a-z0-9_]+) -->")
_SOURCE_DIR = "source"


def _repo(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _docs(config: Any) -> Path:
    return Path(config["docs_dir"]).resolve()


def _outside_targets(page_path: Path, markdown: str, docs: Path) -> list[tuple[str, Path]]:
    found = []
    for match in _LINK.finditer(markdown):
        target = (page_path.parent / match["target"]).resolve()
        if not target.is_relative_to(docs):
            found.append((match["target"], target))
    return found


def on_files(files: Files, config: Any) -> Files:
    """Publish every repository file a page links to under ``source/``."""
    repo, docs = _repo(config), _docs(config)
    published: set[str] = set()
    for page_file in files.documentation_pages():
        page_path = Path(page_file.abs_src_path or "")
        markdown = page_path.read_text(encoding="utf-8")
        for _, target in _outside_targets(page_path, markdown, docs):
            if not target.is_file() or not target.is_relative_to(repo):
                continue  # reported with the page's name in on_page_markdown
            uri = posixpath.join(_SOURCE_DIR, target.relative_to(repo).as_posix())
            if uri in published:
                continue
            published.add(uri)
            # INCLUDED: a linked `.env.example` or `.ci/...` is published although its
            # path starts with a dot (hidden files are excluded by default).
            files.append(
                File.generated(
                    config, uri, abs_src_path=str(target), inclusion=InclusionLevel.INCLUDED
                )
            )
    return files


def _result_table(name: str, repo: Path, page: str) -> str:
    path = repo / "bench" / "results" / f"{name}.txt"
    try:
        line = path.read_text(encoding="utf-8").strip()
    except OSError:
        log.warning("%s: no bench/results/%s.txt for <!-- RESULT %s -->", page, name, name)
        return ""
    if not line.startswith("RESULT "):
        log.warning("%s: bench/results/%s.txt does not start with 'RESULT '", page, name)
        return ""
    rows = ["| key | value |", "| --- | --- |"]
    for pair in line.removeprefix("RESULT ").split():
        key, sep, value = pair.partition("=")
        if not sep:
            log.warning("%s: bench/results/%s.txt: %r is not key=value", page, name, pair)
            continue
        rows.append(f"| `{key}` | {value} |")
    return "\n".join(rows) + f"\n\n<small>From `bench/results/{name}.txt`.</small>\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Rewrite links that leave the docs folder; expand benchmark result tables."""
    repo, docs = _repo(config), _docs(config)
    page_path = Path(page.file.abs_src_path)
    page_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = (page_path.parent / match["target"]).resolve()
        if target.is_relative_to(docs):
            return match[0]
        if not target.is_relative_to(repo) or not target.is_file():
            log.warning(
                "%s: link to %s names no file in the repository", page.file.src_uri, match["target"]
            )
            return match[0]
        uri = posixpath.join(_SOURCE_DIR, target.relative_to(repo).as_posix())
        return f"]({posixpath.relpath(uri, page_dir or '.')}{match['anchor'] or ''})"

    markdown = _LINK.sub(rewrite, markdown)
    return _RESULT.sub(lambda m: _result_table(m["name"], repo, page.file.src_uri), markdown)

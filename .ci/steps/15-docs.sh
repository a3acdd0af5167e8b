#!/usr/bin/env bash
# Documentation site: `mkdocs build --strict` (mkdocs.yml). Fails on a broken link or
# anchor, a nav entry without its page, a page left out of the nav, a link to a repository
# file that does not exist, or a benchmark table without its bench/results/*.txt
# (docs/_hooks/site.py). The README stays a front door of at most 200 lines.
set -euo pipefail
export NO_MKDOCS_2_WARNING=1  # mkdocs-material's banner about MkDocs 2
cd "$(dirname "$0")/../.."
lines=$(wc -l < README.md)
if [ "$lines" -gt 200 ]; then
  echo "docs: README.md has $lines lines (at most 200); move the detail to docs/" >&2
  exit 1
fi
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
.venv/bin/mkdocs build --strict --site-dir "$site"
echo "docs: mkdocs build --strict passed; README.md is $lines lines"

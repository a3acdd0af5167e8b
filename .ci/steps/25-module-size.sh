#!/usr/bin/env bash
# Module size: no Python module outside tests/ and migrations is longer than 400 lines.
# A module past that becomes a package (or sibling modules) by topic, along its seams
# (docs/development.md, "Code health"). There is no list of exceptions: split the module instead.
# Checks tracked files plus new ones git does not ignore, so pre-commit catches them too.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=400
over=$(
  git ls-files -z --cached --others --exclude-standard -- '*.py' \
    ':(exclude)tests/' ':(exclude,glob)**/migrations/**' |
    xargs -0 -r wc -l |
    awk -v limit="$limit" '$2 != "total" && $1 > limit { printf "  %s: %d lines\n", $2, $1 }'
)
if [ -n "$over" ]; then
  echo "module size: these modules are over $limit lines; split them along their seams:" >&2
  echo "$over" >&2
  exit 1
fi
echo "module size: every non-test module is at most $limit lines"

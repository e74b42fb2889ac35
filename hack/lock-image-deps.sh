#!/usr/bin/env bash
# Regenerates deploy/image/requirements.lock: the image's Python dependencies (pyproject.toml's
# runtime dependencies, resolved for Python 3.11) pinned with their hashes. pip-tools comes from
# PyPI into a throwaway virtual environment.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3.11 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet pip-tools
cd "$root"
"$tmp/venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --no-emit-find-links \
    --output-file deploy/image/requirements.lock pyproject.toml
echo "wrote deploy/image/requirements.lock"

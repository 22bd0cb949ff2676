#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then lint and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python3 -m pip install -q -e '.[test]'
python3 -m ruff check .   # the linter (configuration: pyproject.toml [tool.ruff])
python3 -m pytest "$@"

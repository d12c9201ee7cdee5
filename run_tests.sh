#!/usr/bin/env bash
# Run the test suite: sets up .venv when missing, lints, then runs pytest.
# Extra arguments go to pytest, e.g. ./run_tests.sh -k overlap -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"

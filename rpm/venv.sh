#!/bin/bash
# Builds a self-contained virtual environment for an RPM payload (called from
# the specs' %install):
#
#   rpm/venv.sh BUILDROOT PREFIX LOCK WHEEL
#
# makes BUILDROOT/PREFIX (e.g. /opt/neuraxis/cortex) a venv on the target's
# /usr/bin/python3.11 holding exactly the wheels of LOCK (pinned by hash, no
# dependency resolution) and neuraxis itself (WHEEL), then makes it relocatable
# to PREFIX: script shebangs and pyvenv.cfg point at PREFIX, bytecode is
# compiled once here with PREFIX paths and validated by hash, not by timestamp
# (the service cannot write __pycache__ under ProtectSystem=strict, and rpm may
# clamp file times).
set -euo pipefail

buildroot=$1
prefix=$2
lock=$3
wheel=$4
python=${NEURAXIS_RPM_PYTHON:-/usr/bin/python3.11}
venv=$buildroot$prefix

# The interpreter the target hosts have (python3.11 on RHEL 9 and Fedora): the
# venv's bin/python is a symlink to it and pyvenv.cfg's home is its directory.
[ "$(dirname "$python")" = /usr/bin ] || {
    echo "venv.sh: $python is not in /usr/bin, where the target hosts' python3.11 is" >&2
    exit 1
}
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'

rm -rf "$venv"
"$python" -m venv --without-pip "$venv"
pip=("$python" -m pip --python "$venv/bin/python" install --quiet --no-compile
    --no-warn-script-location --disable-pip-version-check)
# --no-deps: the lock is the whole payload. --require-hashes also makes pip
# choose, among a release's wheels, the one file the lock names.
"${pip[@]}" --no-deps --require-hashes --only-binary=:all: -r "$lock"
"${pip[@]}" --no-deps "$wheel"

site="$venv/lib/python3.11/site-packages"
# pip records where the neuraxis wheel came from (this build directory).
rm -f "$site"/neuraxis-*.dist-info/direct_url.json
# Activation scripts are for interactive shells; the services run bin/ directly.
rm -f "$venv"/bin/activate "$venv"/bin/activate.* "$venv"/bin/Activate.ps1

# Relocate: text files naming the build root (script shebangs, pyvenv.cfg).
grep -rlIF --null "$buildroot" "$venv" | xargs -0 -r sed -i "s|$buildroot||g"

# Bytecode: -s/-p record PREFIX paths in tracebacks; unchecked-hash pycs are
# used as they are (the .py files are rpm-verified, not edited in place).
# -x: test fixtures of some packages that are not Python 3.11 on purpose.
"$python" -m compileall -q -j 0 --invalidation-mode unchecked-hash \
    -s "$buildroot" -p / "$site" >"$venv.compileall.log" 2>&1 || {
    # A failure is only allowed where the source is not Python 3 syntax; list it.
    if grep -v -E '^(\*\*\*|  |SyntaxError|Listing|Compiling)' "$venv.compileall.log" | grep -q .; then
        cat "$venv.compileall.log" >&2
        exit 1
    fi
    echo "venv.sh: files left uncompiled (not Python 3.11 source):" >&2
    grep '^\*\*\* Error compiling' "$venv.compileall.log" >&2 || true
}
rm -f "$venv.compileall.log"

if grep -rlF "$buildroot" "$venv" | head -5 | grep .; then
    echo "venv.sh: files above still name the build root $buildroot" >&2
    exit 1
fi

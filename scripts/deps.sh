#!/bin/sh
# Install whatever is missing of the Debian packages poolscope needs.
# Idempotent: when everything is present it returns at once without touching
# apt. Needs root (or sudo) only when something is missing.
set -eu

PKGS="build-essential g++ clang llvm libclang-rt-14-dev pkg-config libunwind-dev libsqlite3-dev sqlite3
gnuplot-nox libcmocka-dev libdw-dev libelf-dev zlib1g-dev libzstd-dev valgrind heaptrack libjemalloc-dev golang-go protobuf-compiler
libmimalloc-dev prometheus python3 python3-dev python3-torch python3-pytest python3-pip python3-venv python3-setuptools python3-wheel git"
# The HTML report's browser test (tests/integration/html.sh): Debian's
# chromium and node, and npm unless the node installed ships its own.
PKGS="$PKGS chromium nodejs"
command -v npm > /dev/null 2>&1 || PKGS="$PKGS npm"
# `poolscope top` is tested in a real terminal (tests/integration/top.sh): tmux.
PKGS="$PKGS tmux"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "deps: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "deps: need root to install:$missing" >&2; exit 2; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
# prometheus pulls in a daemon; we only want promtool, so do not start it.
$SUDO apt-get install -y -qq --no-install-recommends $missing >&2

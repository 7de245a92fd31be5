#!/usr/bin/env bash
# Check the manylinux2014_aarch64 wheel the way an ARM64 user gets it: Debian sid's arm64
# CPython 3.14 (unpacked into .sid/arm64, no compiler in it) runs under qemu-user; a fresh venv
# installs the wheel and the test requirements from PyPI as binaries only; then Django's
# contract, the async contract and the installed-wheel smoke (compressors, near cache) run
# against a real redis-server. The servers are this host's own x86_64 redis-server: qemu-user
# hands the fixtures' exec of it to the kernel.
#
#   scripts/arm64_check.sh [WHEEL]     (default: the aarch64 wheel in dist/)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=.sid/arm64
qemu=$(command -v qemu-aarch64-static || true)
if [[ -z $qemu ]]; then
    apt-get install -y --no-install-recommends qemu-user-static >/dev/null
    qemu=$(command -v qemu-aarch64-static)
fi
wheel=${1:-$(ls dist/redoxide-*-manylinux2014_aarch64*.whl 2>/dev/null | head -1)}
[[ -f $wheel ]] || { echo "arm64_check: no aarch64 wheel (make wheel)" >&2; exit 1; }

bash scripts/sid_root.sh build "$root" arm64 python3.14 python3.14-venv
root=$(realpath "$root")
if compgen -G "$root/usr/bin/*gcc*" >/dev/null || compgen -G "$root/usr/bin/cc" >/dev/null; then
    echo "arm64_check: a compiler is in $root; the point is to install without one" >&2
    exit 1
fi

venv=$(mktemp -d /tmp/redoxide-arm64.XXXXXX)
trap 'rm -rf "$venv"' EXIT
# Bytecode is written on first import (pip writes none: compiling all of Django emulated is
# minutes), so each module the run imports compiles once.
emu() { env -u PYTHONDONTWRITEBYTECODE "$qemu" -L "$root" "$@"; }

# Without binfmt_misc the kernel cannot exec an arm64 binary, so nothing here may start the
# interpreter as a subprocess: the venv is made without ensurepip (which would), and pip runs
# in the emulated interpreter straight from sid's pip wheel. It picks wheels by the emulated
# interpreter's own tags (cp314, manylinux aarch64).
emu "$root/usr/bin/python3.14" -m venv --without-pip "$venv"
emu "$venv/bin/python" -c 'import platform, sys; print("arm64_check:", platform.machine(), sys.version)'
pip_wheel=$(ls "$root"/usr/share/python-wheels/pip-*.whl | head -1)
# The host fetches the wheels (natively: an emulated TLS download is minutes); the emulated pip
# then resolves and installs from that folder alone, by its own interpreter's tags.
wheelhouse=$venv/wheelhouse
requirements=("django==${SID_DJANGO:-6.1}.*" "pytest>=8" "pytest-timeout>=2.3" "redis>=5" "uvloop>=0.19")
pip_host=$(command -v pip3 || true)
[[ -x .venv/bin/pip ]] && pip_host=.venv/bin/pip
"$pip_host" download --quiet --only-binary=:all: --dest "$wheelhouse" --implementation cp \
    --python-version 3.14 --abi cp314 --abi abi3 --abi none \
    --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 --platform any \
    "${requirements[@]}"
# Binaries only: a requirement without an aarch64/py3 wheel fails here instead of compiling.
emu "$venv/bin/python" "$pip_wheel/pip" install --quiet --only-binary=:all: --no-index --no-compile \
    --find-links "$wheelhouse" "$wheel" "${requirements[@]}"
emu "$venv/bin/python" -c 'import django, redoxide, importlib.metadata as m; print("arm64_check: redoxide", m.version("redoxide"), "from", redoxide.__file__, "| Django", django.__version__)'

# Emulated code runs several times slower: the suite's per-test timeout grows to match.
# pytest-xdist cannot start workers here (see above); ARM64_SHARDS=n runs the suite as n emulated
# processes side by side, each taking every n-th test and a port slice of its own (REDOXIDE_SHARD,
# tests/support/servers.py); each prints its report when all have ended.
shards=${ARM64_SHARDS:-1}
pids=()
for ((shard = 0; shard < shards; shard++)); do
    REDOXIDE_SHARD=$shard/$shards REDOXIDE_EXPECT_MACHINE=aarch64 \
        emu "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout 300 \
        tests/contract tests/unit/test_async_native.py tests/packaging/smoke_installed.py \
        -k "not on_topologies" ${PYTEST_ARGS:-} >"$venv/shard$shard.log" 2>&1 &
    pids+=($!)
done
failed=0
for ((shard = 0; shard < shards; shard++)); do
    wait "${pids[shard]}" || failed=1
    echo "== arm64_check: shard $shard/$shards"
    cat "$venv/shard$shard.log"
done
exit $failed

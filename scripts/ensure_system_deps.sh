#!/usr/bin/env bash
# Install the system tools redoxide's build, tests and demo need, but only those missing:
#   redis-server, redis-cli      (Debian packages redis-server, redis-tools)
#   a C compiler                 (build-essential; the zstd crate compiles C)
#   python3 with venv/ensurepip  (python3-venv on Debian)
#   cargo, rustfmt, clippy       (rustup, into ~/.cargo, when no Rust toolchain is found)
# Runs in a few milliseconds when everything is present. `apt-get update` runs only when a
# package is missing and the package lists are absent or stale.
set -euo pipefail

export PATH="$HOME/.cargo/bin:$PATH"

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo)
fi

packages=()
command -v redis-server >/dev/null 2>&1 || packages+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || packages+=(redis-tools)
command -v cc >/dev/null 2>&1 || packages+=(build-essential)
if ! command -v python3 >/dev/null 2>&1; then
    packages+=(python3 python3-venv)
elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    packages+=(python3-venv)
fi
need_rust=0
if ! command -v cargo >/dev/null 2>&1; then
    need_rust=1
    command -v curl >/dev/null 2>&1 || packages+=(curl ca-certificates)
fi

if ((${#packages[@]})); then
    echo "ensure_system_deps: installing ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt_install=("${sudo[@]}" apt-get install -y --no-install-recommends "${packages[@]}")
    # Try the existing package lists first; refresh them only if that is not enough.
    if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || ! "${apt_install[@]}"; then
        "${sudo[@]}" apt-get update
        "${apt_install[@]}"
    fi
fi

if ((need_rust)); then
    echo "ensure_system_deps: no Rust toolchain found, installing one with rustup into ~/.cargo"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
        sh -s -- -y --profile minimal --component rustfmt,clippy
elif command -v rustup >/dev/null 2>&1; then
    # `make lint` needs these; a minimal rustup profile lacks them.
    for component in rustfmt clippy; do
        if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
            rustup component add "$component"
        fi
    done
fi

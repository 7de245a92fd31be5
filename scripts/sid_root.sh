#!/usr/bin/env bash
# Newer interpreters and toolchains than this Debian ships, from Debian's own newer suite (sid),
# unpacked into a folder of the project's and entered with chroot. Nothing is installed on the
# host: sid's package lists are read through a private apt configuration (its own sources list,
# lists, cache and an empty dpkg status), used only for `apt-get update`, a simulated install
# that lists a package set's dependency closure, and `apt-get download`. Each .deb is unpacked
# with dpkg-deb; no maintainer script runs.
#
#   sid_root.sh build ROOT ARCH PACKAGE...   unpack PACKAGE... and their dependencies (idempotent:
#                                            a stamp records the set, so a second call is instant)
#   sid_root.sh run ROOT CMD...              run CMD in the amd64 ROOT with /proc, /dev and the
#                                            project (at /project) mounted; unmounted on exit
#                                            (runs in one ROOT wait for each other)
#   sid_root.sh clean ROOT                   unmount what is left and remove ROOT (by path)
#
# An arm64 ROOT is not entered with chroot (no binfmt_misc here); run its programs with
# `qemu-aarch64-static -L ROOT ROOT/usr/bin/...` (see scripts/arm64_check.sh).
#
# SID_CACHE (default ~/.cache/redoxide/sid) keeps the package lists and the downloaded .debs.
# SID_MIRROR names the Debian mirror; by default, the one in this host's own apt sources.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project=$(cd "$here/.." && pwd)
cache=${SID_CACHE:-$HOME/.cache/redoxide/sid}
# The Debian mirror this host already uses (its own apt sources), unless SID_MIRROR names one.
host_mirror() {
    python3 - /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources <<'PY'
import re, sys

# Entries as (uri, suites, keyring) from one-line .list files and deb822 .sources files.
entries = []
for path in sys.argv[1:]:
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        continue
    if path.endswith(".sources"):
        for block in re.split(r"\n\s*\n", text):
            fields = {}
            for line in block.splitlines():
                if line.startswith("#") or ":" not in line:
                    continue
                name, value = line.split(":", 1)
                fields[name.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
                continue
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split(), fields.get("signed-by", "")))
    else:
        for line in text.splitlines():
            line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(line) >= 3 and line[0] == "deb":
                entries.append((line[1], [line[2]], ""))

def debian(entry):
    uri, suites, keyring = entry
    if any(s.endswith("-security") for s in suites) or "security" in uri:
        return False
    return uri.rstrip("/").endswith("/debian") or "debian-archive-keyring" in keyring

found = [uri for uri, *_ in filter(debian, entries)]
if not found:
    sys.exit("sid_root: no Debian mirror in this host's apt sources; set SID_MIRROR")
print(found[0].rstrip("/"))
PY
}

apt_conf() {
    local mirror
    mirror=${SID_MIRROR:-$(host_mirror)}
    mkdir -p "$cache/lists/partial" "$cache/archives/partial" "$cache/etc/apt.conf.d" \
        "$cache/etc/preferences.d" "$cache/etc/sources.list.d"
    : >"$cache/status.empty"
    # The mirror's sid index may be older than its Valid-Until: check the signature, not the date.
    echo "deb [check-valid-until=no signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" \
        >"$cache/etc/sources.list"
    cat >"$cache/apt.conf" <<EOF
Dir::Etc::SourceList "$cache/etc/sources.list";
Dir::Etc::SourceParts "$cache/etc/sources.list.d";
Dir::Etc::Parts "$cache/etc/apt.conf.d";
Dir::Etc::Preferences "$cache/etc/preferences";
Dir::Etc::PreferencesParts "$cache/etc/preferences.d";
Dir::State::Lists "$cache/lists";
Dir::State::status "$cache/status.empty";
Dir::Cache "$cache";
Dir::Cache::archives "$cache/archives";
APT::Architectures { "amd64"; "arm64"; };
APT::Get::Download-Only "true";
Debug::NoLocking "true";
APT::Sandbox::User "root";
EOF
}

# apt-get with the private configuration only, passed to this one process (never exported).
sid_apt() {
    APT_CONFIG="$cache/apt.conf" apt-get -o APT::Architecture="$1" "${@:2}"
}

refresh_lists() {
    # Once a day at most: the lists are the slow part, and sid changes slowly enough for tests.
    local stamp="$cache/lists/.refreshed"
    if [[ ! -f $stamp ]] || [[ -n $(find "$stamp" -mmin +1440 2>/dev/null) ]]; then
        sid_apt amd64 -q update
        touch "$stamp"
    fi
}

build() {
    local root=$1 arch=$2
    shift 2
    local want="$arch $*"
    if [[ -f $root/.sid-root.stamp ]] && [[ $(cat "$root/.sid-root.stamp") == "$want" ]]; then
        return 0
    fi
    # One build at a time reads and fills the shared lists and .debs (CI builds two roots at
    # once, and this apt configuration takes no locks of its own).
    mkdir -p "$cache"
    exec 8>"$cache/.build.lock"
    flock 8
    apt_conf
    refresh_lists
    # Which packages an install of "$@" needs on an empty system (a simulation: nothing installs).
    # Each line: "Inst NAME[:ARCH] (VERSION Debian:unstable [DEB_ARCH])".
    local plan
    plan=$(sid_apt "$arch" -s install "$@" |
        awk '/^Inst /{v=$3; sub(/^\(/, "", v); match($0, /\[[a-z0-9]+\]/); a=substr($0, RSTART + 1, RLENGTH - 2); n=$2; sub(/:.*/, "", n); print n, v, a}')
    [[ -n $plan ]] || { echo "sid_root: no packages resolved for $*" >&2; exit 1; }
    local qualified=() files=() name version deb_arch
    while read -r name version deb_arch; do
        [[ $deb_arch == all ]] && qualified+=("$name") || qualified+=("$name:$deb_arch")
        files+=("${name}_${version//:/%3a}_${deb_arch}.deb")
    done <<<"$plan"
    # apt-get download writes into the current directory; it skips nothing, so ask only for
    # what is not there yet.
    mkdir -p "$cache/debs"
    local missing=() i
    for i in "${!files[@]}"; do
        [[ -f $cache/debs/${files[$i]} ]] || missing+=("${qualified[$i]}=$(awk -v n=$((i + 1)) 'NR == n {print $2}' <<<"$plan")")
    done
    if ((${#missing[@]})); then
        (cd "$cache/debs" && sid_apt "$arch" -q download "${missing[@]}" >/dev/null)
    fi
    remove_root "$root"
    mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
    # Merged /usr, as sid's base-files lays it out: unpack through these links.
    ln -s usr/bin "$root/bin"
    ln -s usr/sbin "$root/sbin"
    ln -s usr/lib "$root/lib"
    ln -s usr/lib64 "$root/lib64"
    local file
    for file in "${files[@]}"; do
        [[ -f $cache/debs/$file ]] || { echo "sid_root: $file was not downloaded" >&2; exit 1; }
        dpkg-deb --fsys-tarfile "$cache/debs/$file" | tar -x --keep-directory-symlink -C "$root"
    done
    # What maintainer scripts or the host would provide.
    mkdir -p "$root/etc/ssl/certs" "$root/dev" "$root/proc" "$root/tmp" "$root/project" "$root/root"
    chmod 1777 "$root/tmp"
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    cp /etc/resolv.conf /etc/hosts /etc/passwd /etc/group "$root/etc/"
    echo "$want" >"$root/.sid-root.stamp"
    echo "sid_root: $root has ${#files[@]} packages ($arch): $*"
}

mounted() {
    awk -v p="$1" '$2 == p {found=1} END {exit !found}' /proc/mounts
}

unmount_all() {
    local root
    root=$(realpath -m "$1")
    for sub in project dev/shm dev proc; do
        if mounted "$root/$sub"; then umount "$root/$sub" || umount -l "$root/$sub"; fi
    done
}

# Remove ROOT, but never through a mount: a bind mount of the project left in it would take the
# checkout with it.
remove_root() {
    local root
    root=$(realpath -m "$1")
    unmount_all "$root"
    if awk -v p="$root/" 'index($2, p) == 1 {found=1} END {exit !found}' /proc/mounts; then
        echo "sid_root: something is still mounted under $root; not removing it" >&2
        exit 1
    fi
    rm -rf --one-file-system "$root"
}

run() {
    local root
    root=$(realpath "$1")
    shift
    [[ -f $root/.sid-root.stamp ]] || { echo "sid_root: $root is not built" >&2; exit 1; }
    # One run per ROOT at a time: the first to end would unmount what the other still uses.
    exec 9>"$root/.sid-run.lock"
    flock 9
    mounted "$root/proc" || mount -t proc proc "$root/proc"
    mounted "$root/dev" || mount --bind /dev "$root/dev"
    if [[ -d /dev/shm ]] && ! mounted "$root/dev/shm"; then mount --bind /dev/shm "$root/dev/shm"; fi
    mounted "$root/project" || mount --bind "$project" "$root/project"
    trap 'unmount_all "'"$root"'"' EXIT
    local status=0
    env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin LANG=C.UTF-8 CI="${CI:-}" \
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
        PYTHONDONTWRITEBYTECODE=1 ${SID_ENV:-} \
        "$(command -v chroot)" "$root" /usr/bin/env --chdir=/project "$@" || status=$?
    return $status
}

case ${1:-} in
build) build "$(realpath -m "$2")" "$3" "${@:4}" ;;
run) run "$2" "${@:3}" ;;
clean) remove_root "$2" ;;
*)
    sed -n '2,20p' "${BASH_SOURCE[0]}"
    exit 2
    ;;
esac

#!/bin/bash
# Builds neuraxis RPMs (the Makefile's rpm targets call this).
#
#   rpm/build.sh srpm   TARGET...   source RPMs only
#   rpm/build.sh binary TARGET...   source RPMs, then binary RPMs rebuilt from them
#
# TARGET: cortex (neuraxis-common and neuraxis-cortex) or a neuron flavour (cpu,
# ampere, ada, hopper, blackwell). Output in $NEURAXIS_RPM_DIR (default build/rpm):
# SRPMS/, RPMS/{x86_64,noarch}/, and build-times.txt with each build's seconds.
# The binary build needs the package index (PyPI) for the locked wheels; a GPU
# flavour needs ~20 GB free under $NEURAXIS_RPM_DIR while it builds. Debian's
# rpm has none of the BuildRequires in its database, hence --nodeps.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:?usage: rpm/build.sh srpm|binary TARGET...}
shift
[ $# -gt 0 ] || set -- cortex cpu
out=$(realpath -m "${NEURAXIS_RPM_DIR:-build/rpm}")
release=${NEURAXIS_RPM_RELEASE:-1}
python=${NEURAXIS_RPM_PYTHON:-/usr/bin/python3.11}
version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
top=$out/rpmbuild
# The build trees hold a whole payload (GBs): never leave them behind.
trap 'rm -rf "${top:?}/BUILD" "${top:?}/BUILDROOT"' EXIT

command -v rpmbuild >/dev/null || {
    echo "rpm/build.sh: rpmbuild is missing (Debian: apt-get install rpm; make rpm does it)" >&2
    exit 1
}
mkdir -p "$top"/{SOURCES,SPECS,SRPMS,RPMS,BUILD,BUILDROOT} "$out/SRPMS" "$out/RPMS"

# The source tarball: the working tree's files as git sees them (tracked and
# untracked, not ignored), so that a build tests what is checked out.
tarball=$top/SOURCES/neuraxis-$version.tar.gz
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - --transform "s|^|neuraxis-$version/|" --owner=0 --group=0 --mtime=@0 \
        --sort=name -czf "$tarball"
cp rpm/macros.neuraxis "$top/SOURCES/"

rpmbuild_() {
    rpmbuild --nodeps --define "_topdir $top" "$@"
}

name_for() { # TARGET -> the source package's name
    case $1 in
    cortex) echo neuraxis ;;
    cpu | ampere | ada | hopper | blackwell) echo "neuraxis-neuron-$1" ;;
    *)
        echo "rpm/build.sh: unknown target $1 (cortex, cpu, ampere, ada, hopper, blackwell)" >&2
        exit 1
        ;;
    esac
}

spec_for() { # TARGET -> path of the spec to build, with its sources in place
    local target=$1 spec
    spec=$(name_for "$target")
    cp "rpm/locks/$target.txt" "$top/SOURCES/"
    {
        [ "$target" = cortex ] || echo "%global flavour $target"
        echo "%global neuraxis_version $version"
        echo "%global neuraxis_release $release"
        if [ "$target" = cortex ]; then cat rpm/neuraxis.spec; else cat rpm/neuraxis-neuron.spec; fi
    } >"$top/SPECS/$spec.spec"
    echo "$top/SPECS/$spec.spec"
}

for target in "$@"; do name_for "$target" >/dev/null; done
for target in "$@"; do
    spec=$(spec_for "$target")
    rpmbuild_ -bs "$spec" | sed -n 's/^Wrote: //p' | while read -r srpm; do
        cp "$srpm" "$out/SRPMS/"
        echo "rpm/build.sh: $(basename "$srpm")"
    done
done

[ "$mode" = binary ] || exit 0

for target in "$@"; do
    name=$(name_for "$target")
    srpm=$out/SRPMS/$name-$version-$release.src.rpm
    started=$(date +%s)
    # --rebuild: from the source RPM alone, as a GPU build host would.
    status=0
    rpmbuild_ --rebuild "$srpm" >"$out/$name.log" 2>&1 || status=$?
    grep -E '^(Wrote|error|RPM build)' "$out/$name.log" || true
    [ "$status" = 0 ] || {
        tail -20 "$out/$name.log" >&2
        echo "rpm/build.sh: $name failed; the log is $out/$name.log" >&2
        exit 1
    }
    seconds=$(($(date +%s) - started))
    sed -n 's/^Wrote: //p' "$out/$name.log" | while read -r rpm; do
        arch=$(basename "$(dirname "$rpm")")
        mkdir -p "$out/RPMS/$arch"
        mv "$rpm" "$out/RPMS/$arch/"
    done
    grep -v "^$name " "$out/build-times.txt" 2>/dev/null >"$out/build-times.txt.new" || true
    echo "$name $seconds" >>"$out/build-times.txt.new"
    mv "$out/build-times.txt.new" "$out/build-times.txt"
    echo "rpm/build.sh: $name built in ${seconds}s"
done
ls -la "$out"/RPMS/*/

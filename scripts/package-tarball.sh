#!/usr/bin/env bash
# The release tarball: target/dist/dq-<version>-x86_64-linux.tar.gz (in
# $CARGO_TARGET_DIR when set), one directory dq-<version>-x86_64-linux/
# holding bin/dq (stripped), systemd/dq.service (deploy/systemd's unit, as
# it is: /usr/local/bin/dq, a dynamic user), README.md and docs/. For a
# machine without Rust:
#
#   tar -xzf dq-<version>-x86_64-linux.tar.gz && cd dq-<version>-x86_64-linux
#   install -m 0755 bin/dq /usr/local/bin/dq
#   install -m 0644 systemd/dq.service /etc/systemd/system/dq.service
#   systemctl daemon-reload && systemctl enable --now dq
#
#   scripts/package-tarball.sh
#
# Environment: DQ_PACKAGE_PROFILE (default release; dev packages the debug
# build, for tests) and DQ_PACKAGE_NO_BUILD=1 (package the binary already
# built), as scripts/package-deb.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${DQ_PACKAGE_PROFILE:-release}
case $profile in
  dev) dir=debug ;;
  *) dir=$profile ;;
esac
if [ "${DQ_PACKAGE_NO_BUILD:-}" != 1 ]; then
  cargo build --locked -p dq-cli --bin dq --profile "$profile" >&2
fi
target=${CARGO_TARGET_DIR:-target}
bin=$target/$dir/dq
[ -x "$bin" ] || { echo "package-tarball: no $bin (build it, or unset DQ_PACKAGE_NO_BUILD)" >&2; exit 1; }

id=$(cargo pkgid -p dq-cli)
version=${id##*[#@]}
name=dq-$version-x86_64-linux
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/$name
mkdir -p "$root/bin" "$root/systemd"
# Stripped: the debug information is most of an unstripped binary.
strip --strip-unneeded -o "$root/bin/dq" "$bin"
chmod 0755 "$root/bin/dq"
install -m 0644 deploy/systemd/dq.service "$root/systemd/dq.service"
install -m 0644 README.md "$root/README.md"
cp -R docs "$root/docs"

mkdir -p "$target/dist"
out=$target/dist/$name.tar.gz
# The same files give the same archive: owner, order and times fixed (the
# times are the last commit's).
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
  -C "$stage" -cf - "$name" | gzip -n >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out"

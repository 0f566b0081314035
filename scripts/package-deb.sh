#!/usr/bin/env bash
# The Debian package: target/debian/dq_<version>_amd64.deb (in
# $CARGO_TARGET_DIR when set), made by cargo-deb from crates/dq-cli's
# [package.metadata.deb]: /usr/bin/dq, the systemd unit, /etc/dq/dq.env (a
# conffile), the docs in /usr/share/doc/dq, and maintainer scripts that make
# the dq system user and /var/lib/dq (deploy/debian/). Install it with
# `dpkg -i`, then `systemctl enable --now dq`.
#
#   scripts/package-deb.sh
#
# The unit is deploy/systemd/dq.service with two changes, made here into
# deploy/debian/generated/dq.service: ExecStart runs /usr/bin/dq, and the
# service runs as the package's dq user in place of DynamicUser=yes.
#
# Environment:
#   DQ_PACKAGE_PROFILE   cargo profile of the packaged binary (default
#                        release; dev packages the debug build, for tests)
#   DQ_PACKAGE_NO_BUILD  1: package the binary already built, build nothing
#   CARGO_DEB            the cargo-deb to run (default: the one on the PATH,
#                        else ~/.cache/dq-cargo-deb/bin/cargo-deb, installed
#                        there with `cargo install` the first time)
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${DQ_PACKAGE_PROFILE:-release}
cargo_deb_version=3.8.0

if [ -z "${CARGO_DEB:-}" ]; then
  if command -v cargo-deb >/dev/null; then
    CARGO_DEB=$(command -v cargo-deb)
  else
    root=$HOME/.cache/dq-cargo-deb
    CARGO_DEB=$root/bin/cargo-deb
    if ! [ -x "$CARGO_DEB" ]; then
      echo "installing cargo-deb $cargo_deb_version into $root (once)" >&2
      # In a directory of its own, not $CARGO_TARGET_DIR (which a running
      # `cargo test` may hold).
      env -u CARGO_TARGET_DIR cargo install cargo-deb --version "$cargo_deb_version" --locked --root "$root" >&2
    fi
  fi
fi

# The packaged unit, from the one unit of deploy/systemd.
unit=deploy/systemd/dq.service
out=deploy/debian/generated/dq.service
mkdir -p "$(dirname "$out")"
{
  echo "# dq as a systemd service, from the dq Debian package: the embedded store"
  echo "# in /var/lib/dq, run as the dq system user. Not enabled on install:"
  echo "#   systemctl enable --now dq"
  echo "# Made by scripts/package-deb.sh from deploy/systemd/dq.service (/usr/bin/dq,"
  echo "# User=dq in place of DynamicUser=yes); see /usr/share/doc/dq/operations.md."
  echo "#"
  # The source's comments after its install lines (settings, restarts),
  # pointing at the docs where the package puts them.
  awk 'NR > 1 && /^# Settings:/ { on = 1 } on' "$unit" \
    | sed -e '/^#/s|docs/\([a-z-]*\.md\)|/usr/share/doc/dq/\1|g' \
          -e 's|^ExecStart=/usr/local/bin/dq |ExecStart=/usr/bin/dq |' \
          -e 's|^DynamicUser=yes$|User=dq\nGroup=dq|'
} >"$out.tmp"
# Each change took, and nothing of the dynamic user or /usr/local is left.
grep -qx 'ExecStart=/usr/bin/dq serve' "$out.tmp" && grep -qx 'User=dq' "$out.tmp" \
  && grep -qx '\[Unit\]' "$out.tmp" && ! grep -v '^#' "$out.tmp" | grep -q 'DynamicUser\|/usr/local' \
  || { echo "package-deb: $unit no longer has the lines this script changes" >&2; rm -f "$out.tmp"; exit 1; }
mv "$out.tmp" "$out"

args=(deb -p dq-cli --locked --profile "$profile")
if [ "${DQ_PACKAGE_NO_BUILD:-}" = 1 ]; then
  args+=(--no-build)
fi
if [ "$profile" = dev ]; then
  # A test's package: lighter compression, and cargo-deb's warning that dev
  # is for tests only is expected.
  args+=(--fast)
fi
deb=$("$CARGO_DEB" "${args[@]}")
echo "$deb"

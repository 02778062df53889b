#!/usr/bin/env bash
# Vendor every crate the workspace locks, on a connected machine, for an
# offline build. Writes, under OUT (default target/vendor-bundle):
#   vendor/            `cargo vendor --locked --versioned-dirs` (every crate of
#                      Cargo.lock, checked below against its checksum there)
#   cargo-config.toml  the source replacement that points cargo at vendor/
#                      (what `cargo vendor` prints; build-static.sh --offline
#                      writes its own with absolute paths)
#   source.env         the commit and its time (for the image's labels)
#   openmed-operator-<version>-vendored.tar.gz
#                      the tracked sources of this checkout plus vendor/, to
#                      carry into the air gap: unpack it and run
#                      scripts/build-static.sh --offline there.
# The vendored tree is produced, never committed.
#
# Usage: scripts/vendor.sh [OUT]
# Needs: cargo, python3, git, network access to crates.io (only here).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

OUT="$(realpath -m "${1:-$REPO/target/vendor-bundle}")"
rm -rf "$OUT/vendor"
mkdir -p "$OUT"
say "cargo vendor into $OUT/vendor"
cargo vendor --locked --versioned-dirs "$OUT/vendor" >"$OUT/cargo-config.toml"
sed -i "s#directory = \".*\"#directory = \"vendor\"#" "$OUT/cargo-config.toml"

say "Every vendored crate's checksum is the one Cargo.lock records"
python3 - "$OUT/vendor" <<'PY'
import json, os, sys, tomllib
vendor = sys.argv[1]
with open("Cargo.lock", "rb") as f:
    lock = [p for p in tomllib.load(f)["package"] if p.get("checksum")]
bad = []
for p in lock:
    d = os.path.join(vendor, f"{p['name']}-{p['version']}")
    try:
        with open(os.path.join(d, ".cargo-checksum.json")) as f:
            got = json.load(f)["package"]
    except OSError:
        bad.append(f"{p['name']} {p['version']}: not vendored")
        continue
    if got != p["checksum"]:
        bad.append(f"{p['name']} {p['version']}: {got} is not Cargo.lock's {p['checksum']}")
extra = set(os.listdir(vendor)) - {f"{p['name']}-{p['version']}" for p in lock}
bad += [f"{e}: vendored but not in Cargo.lock" for e in sorted(extra)]
for b in bad:
    print("  " + b, file=sys.stderr)
if bad:
    sys.exit("vendor: the vendored tree does not match Cargo.lock")
print(f"    {len(lock)} crates, each matching Cargo.lock's checksum")
PY

# What the image labels and the SBOM need from git, for a tree without it.
printf 'REVISION=%s\nSOURCE_DATE_EPOCH=%s\n' "$(git rev-parse HEAD)" "$(git log -1 --format=%ct)" >"$OUT/source.env"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tarball="$OUT/openmed-operator-$version-vendored.tar.gz"
say "The source bundle to carry: $tarball"
list="$OUT/files.txt"
# This checkout's tracked files (those still there; nothing untracked, which
# may be private), then the vendored tree, as one reproducible tar: sorted
# names, fixed owner and time.
git ls-files -z --cached | python3 -c '
import os, sys
names = [n for n in sys.stdin.buffer.read().split(b"\0") if n and os.path.lexists(n)]
sys.stdout.buffer.write(b"".join(n + b"\0" for n in sorted(names)))' >"$list"
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar --null -T "$list" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
  --transform "s#^#openmed-operator-$version/#" -cf "$OUT/bundle.tar"
tar -C "$OUT" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
  --transform "s#^#openmed-operator-$version/target/vendor-bundle/#" -rf "$OUT/bundle.tar" vendor cargo-config.toml source.env
gzip -9n <"$OUT/bundle.tar" >"$tarball"
rm -f "$OUT/bundle.tar" "$list"
info "$(du -h "$tarball" | cut -f1) ($(find "$OUT/vendor" -mindepth 1 -maxdepth 1 | wc -l) crates)"
info "offline: tar xzf $(basename "$tarball") && cd openmed-operator-$version && scripts/build-static.sh --offline"

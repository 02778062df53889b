#!/usr/bin/env bash
# Build a truly static x86_64 musl binary of the operator, the artefact the
# image ships, on a machine without a container engine, and its SBOM.
#
# Route (Debian bookworm): Debian's Rust (rustc-web, cargo-web) with its
# standard-library source (rust-web-src, which carries std's own crates in
# library/vendor) rebuilds std for the musl target (-Z build-std, enabled on
# a stable compiler by RUSTC_BOOTSTRAP=1), linked by musl-gcc (musl-tools)
# against LLVM's libunwind (libunwind-14-dev). The release profile uses
# panic = "abort", so no unwinder shim is needed, and nothing reads unwind
# tables: Rust and C are built without them (-C force-unwind-tables=no,
# -fno-asynchronous-unwind-tables), 225 KB of .eh_frame. About 1-4 minutes
# on 2 cores.
#
# Reproducible: every path that could reach the binary (this tree, the crate
# sources, the target directory) is remapped to a fixed one, for rustc and
# for the C compiler ring's build runs, so the same commit built in another
# directory, at another time, gives the same bytes (scripts/supply-chain.sh
# checks it).
#
# Usage: scripts/build-static.sh [--offline] [--out DIR] [--features F] [--bin NAME] [--check]
#   --offline  build from the vendored crates (scripts/vendor.sh; VENDOR_DIR,
#              default target/vendor-bundle/vendor) with --offline --locked,
#              inside a network namespace of its own (unshare -n), so no
#              network is used, provably; CARGO_HOME is a fresh directory.
#   --out DIR  the target directory (default target/static); the binary is
#              DIR/x86_64-unknown-linux-musl/release/openmed-operator and its
#              SBOM DIR/openmed-operator.cdx.json.
#   --features F  cargo features, e.g. alloc-count for the benchmark's
#              counting build (scripts/bench.sh); never for a release.
#   --bin NAME another binary of the package (alloc-stress, for
#              scripts/alloc-proof.sh), built beside it, without an SBOM.
#   --check    also prove the result: `file` says statically linked, there is
#              no ELF interpreter, and it runs from an otherwise empty root
#              (chroot) against the simulated API server and converges the
#              example OpenMedModel.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

OFFLINE=0 CHECK=0 FEATURES=() NAME=openmed-operator
OUT="$REPO/target/static"
while (($#)); do
  case $1 in
    --offline) OFFLINE=1 ;;
    --check) CHECK=1 ;;
    --out) OUT="$(realpath -m "$2")" && shift ;;
    --features) FEATURES=(--features "$2") && shift ;;
    --bin) NAME="$2" && shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
  esac
  shift
done

STD_SRC=/usr/lib/rustlib/src/rust/library
for need in /usr/bin/cargo /usr/bin/rustc /usr/bin/musl-gcc /usr/lib/llvm-14/lib/libunwind.a "$STD_SRC"; do
  [[ -e $need ]] || die "$need missing: apt-get install rustc-web cargo-web rust-web-src musl-tools libunwind-14-dev"
done

TARGET=x86_64-unknown-linux-musl
BIN="$OUT/$TARGET/release/$NAME"
mkdir -p "$OUT"
REGISTRY_SRC="${CARGO_HOME:-$HOME/.cargo}/registry/src"
NET=()
if ((OFFLINE)); then
  VENDOR="$(realpath -m "${VENDOR_DIR:-$REPO/target/vendor-bundle/vendor}")"
  [[ -d $VENDOR ]] || die "no vendored crates at $VENDOR: run scripts/vendor.sh on a connected machine"
  # One directory source with our crates and std's (Debian's library/vendor):
  # -Z build-std resolves std's dependencies through the same replacement.
  SOURCES="$OUT/sources"
  rm -rf "$SOURCES" "$OUT/cargo-home"
  mkdir -p "$SOURCES" "$OUT/cargo-home"
  for d in "$VENDOR"/* "$STD_SRC"/vendor/*; do
    [[ -e $SOURCES/$(basename "$d") ]] || ln -s "$d" "$SOURCES/$(basename "$d")"
  done
  printf '[source.crates-io]\nreplace-with = "vendored"\n[source.vendored]\ndirectory = "%s"\n[net]\noffline = true\n' \
    "$SOURCES" >"$OUT/cargo-home/config.toml"
  export CARGO_HOME="$OUT/cargo-home"
  REGISTRY_SRC="$SOURCES"
  # Root may make the namespace; anyone else maps to root in a user namespace.
  NET=(unshare -n)
  ((EUID == 0)) || NET=(unshare -rn)
  "${NET[@]}" true || die "cannot make a network namespace (unshare -n)"
  # shellcheck disable=SC2016 # awk's own $1
  links=$("${NET[@]}" awk 'NR > 2 { printf "%s", $1 }' /proc/net/dev)
  [[ $links == lo: ]] || die "the build namespace has network interfaces: $links"
fi

# Remapped (without it, 178 panic locations name the crates' directory): the
# source tree, the target directory and the crate sources (with the
# build-std symlinks, which rustc sees by the link's path; the last match
# wins, and the sources may lie under the target directory).
remap="--remap-path-prefix=$REPO=/build/openmed-operator --remap-path-prefix=$OUT=/build/target"
remap+=" --remap-path-prefix=$REGISTRY_SRC=/build/crates"
cmap="-ffile-prefix-map=$REPO=/build/openmed-operator -ffile-prefix-map=$OUT=/build/target"
cmap+=" -ffile-prefix-map=$REGISTRY_SRC=/build/crates"
# std without its `backtrace` feature: the binary is stripped, so std's DWARF
# symbolizer (addr2line, gimli, object) could never name a frame; a panic still
# prints its message and location. 182 KB (docs/performance.md, binary).
say "Building $TARGET with $(/usr/bin/rustc --version)$( ((OFFLINE)) && echo ", offline, in a network namespace")"
start=$SECONDS
"${NET[@]}" env RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
  CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=musl-gcc \
  CFLAGS_x86_64_unknown_linux_musl="-fno-asynchronous-unwind-tables -fno-unwind-tables $cmap" \
  RUSTFLAGS="-C force-unwind-tables=no -C link-self-contained=no -C relocation-model=static -L native=/usr/lib/llvm-14/lib $remap" \
  /usr/bin/cargo build --release --locked --bin "$NAME" "${FEATURES[@]}" \
  -Z build-std=std,panic_abort -Z build-std-features= --target "$TARGET" --target-dir "$OUT"
info "built in $((SECONDS - start)) s: $BIN, $(stat -c %s "$BIN") bytes (stripped), sha256 $(sha256sum "$BIN" | cut -d' ' -f1)"
[[ $NAME == openmed-operator ]] || exit 0
source_info # the SBOM's time is the commit's
"${NET[@]}" python3 scripts/sbom.py "$BIN" "$OUT/openmed-operator.cdx.json" | sed 's/^/    /'

((CHECK)) || exit 0

say "Checking that it is static"
desc=$(file -b "$BIN")
info "file: $desc"
[[ $desc == *"statically linked"* ]] || die "not statically linked: $desc"
headers=$(readelf -l "$BIN") || die "readelf cannot read $BIN"
[[ $headers == *"Program Headers"* ]] || die "readelf printed no program headers for $BIN"
[[ $headers != *INTERP* ]] || die "the binary names an ELF interpreter"
"$BIN" --version

say "Running it from an empty root against the simulated API server"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/omo-static.XXXXXX")"
trap 'stop_all; rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
mkdir -p "$ROOT"
cp "$BIN" "$ROOT/openmed-operator"
info "the root holds: $(cd "$ROOT" && find . -mindepth 1 | tr '\n' ' ')"
start_sim "$WORK/sim" --warmup-ms 300
kc apply -f "$REPO/manifests/base/crd.json"
kc wait --for condition=established --timeout=20s crd/openmedmodels.openmed.ai
kc apply -f "$REPO/manifests/sample-deployment.yaml"
CHROOT=(chroot)
((EUID == 0)) || CHROOT=(unshare -r chroot)
"${CHROOT[@]}" "$ROOT" /openmed-operator --server "$SIM_URL" --health-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --ui-addr 127.0.0.1:0 --namespace openmed \
  >"$WORK/operator.log" 2>&1 &
OP_PID=$!
# shellcheck source=scripts/scenario.sh
source "$REPO/scripts/scenario.sh"
NS=openmed
TIMEOUT=60
scenario_ready
scenario_delete
stop_operator
say "static binary: statically linked, no interpreter, converged from an empty root"

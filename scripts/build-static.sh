#!/usr/bin/env bash
# Build a truly static x86_64 musl binary of the operator, the artefact the
# Containerfile ships, on a machine without a container engine.
#
# Route (Debian bookworm): Debian's Rust (rustc-web, cargo-web) with its
# standard-library source (rust-web-src) rebuilds std for the musl target
# (-Z build-std, enabled on a stable compiler by RUSTC_BOOTSTRAP=1), linked by
# musl-gcc (musl-tools) against LLVM's libunwind (libunwind-14-dev). The
# release profile uses panic = "abort", so no unwinder shim is needed.
# Needs: those five packages, crates.io. Takes about 3-4 minutes on 2 cores.
#
# Usage: scripts/build-static.sh [--check]
#   --check  also prove the result: `file` says statically linked, there is
#            no ELF interpreter, and it runs from an otherwise empty root
#            (chroot) against the simulated API server and converges the
#            example OpenMedModel.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

for need in /usr/bin/cargo /usr/bin/rustc /usr/bin/musl-gcc /usr/lib/llvm-14/lib/libunwind.a /usr/lib/rustlib/src/rust/library; do
  [[ -e $need ]] || die "$need missing: apt-get install rustc-web cargo-web rust-web-src musl-tools libunwind-14-dev"
done

TARGET=x86_64-unknown-linux-musl
OUT="$REPO/target/static"
BIN="$OUT/$TARGET/release/openmed-operator"
say "Building $TARGET with $(/usr/bin/rustc --version)"
start=$SECONDS
RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
  CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=musl-gcc \
  RUSTFLAGS="-C link-self-contained=no -C relocation-model=static -L native=/usr/lib/llvm-14/lib" \
  /usr/bin/cargo build --release --locked --bin openmed-operator \
  -Z build-std=std,panic_abort --target "$TARGET" --target-dir "$OUT"
info "built in $((SECONDS - start)) s: $BIN, $(stat -c %s "$BIN") bytes (stripped)"

[[ ${1:-} == --check ]] || exit 0

say "Checking that it is static"
desc=$(file -b "$BIN")
info "file: $desc"
[[ $desc == *"statically linked"* ]] || die "not statically linked: $desc"
if readelf -l "$BIN" | grep -q INTERP; then die "the binary names an ELF interpreter"; fi
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
"${CHROOT[@]}" "$ROOT" /openmed-operator --server "$SIM_URL" --health-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --namespace openmed \
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

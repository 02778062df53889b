#!/usr/bin/env bash
# Install what the whole suite needs and a fresh machine lacks: Debian's
# packages for the static build, shellcheck and the network-namespace test,
# and rustup's rustfmt and clippy. Idempotent and quiet when all is there.
# scripts/test.sh runs it first, so the README's test command works on a
# fresh machine by itself; .ci/run runs exactly scripts/test.sh.
set -euo pipefail

SUDO=()
((EUID == 0)) || SUDO=(sudo)
# Static build (build-static.sh), shellcheck, `file`, `unshare`, `ip`; the
# image checks (image.sh: skopeo, umoci, crun) and curl; the live view's
# browser test (ui-e2e.sh: Debian's Chromium, driven from Node.js); the
# real control plane's certificates (control-plane.sh: openssl); the
# allocator's proof and the benchmark's instruction counts (valgrind), and
# its system-call counts (bench.sh --syscalls: perf).
packages=(rustc-web cargo-web rust-web-src musl-tools libunwind-14-dev shellcheck file util-linux iproute2
  skopeo umoci crun curl chromium openssl valgrind linux-perf)
command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v kubectl >/dev/null || { echo "kubectl is required and is preinstalled on these machines" >&2; exit 1; }
# The real control plane is built from Go modules (scripts/control-plane.sh): Go 1.26 at /usr/local/go.
go=$(command -v go || echo /usr/local/go/bin/go)
[[ -x $go ]] || { echo "Go is required to build the real control plane (expected at /usr/local/go)" >&2; exit 1; }
for c in rustfmt clippy; do
  cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$c"
done

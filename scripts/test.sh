#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and end-to-end
# tests, the kubectl end-to-end script, manifest validation, shellcheck, the
# dependency audit and the supply chain (vendored offline static build, twice,
# byte for byte; SBOM; the OCI image, run by crun) and the story on the real
# control plane, built from its Go modules (cached outside the work tree:
# scripts/control-plane.sh). `.ci/run` runs
# exactly this. It first installs what a fresh machine lacks
# (scripts/install-deps.sh: Debian packages, rustfmt, clippy); it needs
# cargo, kubectl and python3 to be there. Each step prints its time, and
# docs/performance.md ("Durations of the slower checks") records a run's.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
start=$SECONDS
step() {
  say "$1"
  local t=$SECONDS
  shift
  "$@"
  info "($((SECONDS - t)) s)"
}

if [[ -d $HOME/.cargo/bin ]]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
step "Installing what is missing" scripts/install-deps.sh
step "Formatting" cargo fmt --all -- --check
step "Lints" cargo clippy --workspace --all-targets --locked -- -D warnings
step "Lints of the allocator's stress test" cargo clippy --locked --bin alloc-stress --features memcheck -- -D warnings
step "Unit, integration and end-to-end tests (Rust)" cargo test --workspace --locked
step "The counting allocator, and the bytes held for each model and each connection" cargo test --locked --lib --features alloc-count -- memory::count controller::footprint kube::client::footprint runtime::store::tests::a_buried_uid_keeps_a_few_bytes
step "The allocator's proof: its stress test, natively and under valgrind's memcheck" scripts/alloc-proof.sh
step "kubectl end to end on the simulated cluster" scripts/e2e-sim.sh
step "Manifests against the upstream Kubernetes schemas" scripts/check-manifests.sh
step "shellcheck" shellcheck -x scripts/*.sh .ci/run
step "gofmt and go vet (the kubelet stand-in)" scripts/control-plane.sh lint
step "Dependency audit" scripts/audit.sh
step "The live view in a real browser (headless Chromium)" scripts/ui-e2e.sh
step "Supply chain: vendored offline reproducible static build, SBOM, OCI image run by crun" scripts/supply-chain.sh
step "The real control plane (etcd, kube-apiserver, kube-controller-manager from their Go modules): the story, and kubesim held to it" \
  scripts/real-e2e.sh
say "All checks passed in $((SECONDS - start)) s"

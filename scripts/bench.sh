#!/usr/bin/env bash
# The scale benchmark (issue 17): the operator started cold over N existing
# OpenMedModels (each with its own Deployment) on kubesim, measured from
# outside (/proc, kubesim's request log); prints one table row per size:
# time to all RollingOut and all Ready, requests per resource by verb, peak
# and steady RSS, CPU to converge and per resync, spec change -> Deployment
# patch p50/p99, and the machine's load. Budgets are not asserted.
#   scripts/bench.sh                        # 1,000 and 10,000, release build
#   scripts/bench.sh --resources 100 --resources 1000 --bin target/static/x86_64-unknown-linux-musl/release/openmed-operator
#   scripts/bench.sh --resources 1000 --args "--workers 4 --qps 200"
#   scripts/bench.sh --resources 1000 --latency-ms 5   # every request 5 ms, as on a real cluster
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

sizes=()
bin=""
args=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --resources) sizes+=("$2"); shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --args) args="$2"; shift 2 ;;
    --latency-ms) export OMO_BENCH_LATENCY_MS="$2"; shift 2 ;;
    *) die "unknown argument $1 (--resources N, --bin PATH, --args FLAGS, --latency-ms MS)" ;;
  esac
done
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000 10000)
list=$(IFS=,; echo "${sizes[*]}")

say "Building (release: the operator, kubesim and the benchmark)"
cargo build --release --bin openmed-operator
[[ -n $bin ]] || bin="$REPO/target/release/openmed-operator"
[[ -x $bin ]] || die "$bin is not an executable"
info "operator: $bin; $(nproc) cores; sizes: $list"

say "Benchmark"
info "operator flags: ${args:-(defaults)}"
OMO_BENCH_RESOURCES="$list" OMO_OPERATOR_BIN="$bin" OMO_BENCH_ARGS="$args" \
  cargo test --release --test bench -- --nocapture --test-threads 1 2>&1 |
  grep -E '^\|' || die "the benchmark failed (run: OMO_BENCH_RESOURCES=$list cargo test --release --test bench -- --nocapture)"

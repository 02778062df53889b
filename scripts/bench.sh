#!/usr/bin/env bash
# The side-by-side benchmark (docs/performance.md): what ships, the static
# musl build, started cold over N existing OpenMedModels (each with its own
# Deployment) on kubesim over TLS with bearer tokens, then one version change
# for all, then idle; measured from outside (/proc, kubesim's request log).
# Prints one row per contestant and size: time to all Ready (cold and after
# the change), CPU to converge and its kernel share, allocations per
# resource (from a counting build of the same source), RSS, idle CPU,
# change -> Deployment patch p50/p99, requests per resource, and the load.
# --rounds N runs the contestants N times in alternating order and prints
# each column's median and spread; the instructions to converge are counted
# under valgrind's callgrind at 100 models (--instructions N; 0 for none),
# and with --syscalls N the system calls by kind under perf stat.
# Budgets are not asserted.
#   scripts/bench.sh                                   # 1,000 and 10,000
#   scripts/bench.sh --resources 1000 --rounds 3 --peer /tmp/peer-target/release/peer-kube-rs --peer-args "--trim --concurrency 16"
#   scripts/bench.sh --resources 1000 --glibc --peer /tmp/peer-target/release/peer-kube-rs --peer-args "--trim --concurrency 16"
#   scripts/bench.sh --resources 1000 --bin target/release/openmed-operator --no-count
#   scripts/bench.sh --resources 1000 --args "--workers 4" --idle-seconds 30 --plain --latency-ms 5
#   scripts/bench.sh --cluster real --resources 1000 --rounds 3 --peer /tmp/peer-target/release/peer-kube-rs --peer-args "--trim --concurrency 16"
# --cluster real runs it on the real control plane instead (tests/real/bench.rs:
# a fresh plane per contestant, kube-controller-manager's limits raised; the
# contestants' and kube-apiserver's CPU and memory, requests from the audit log).
# The peer is built outside this tree (../shared/peer-kube-rs/README.md).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

sizes=()
bin="" args="" glibc=0 count=1 cluster=sim rounds=1 instructions=100 syscalls=0
peer="" peer_args=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --resources) sizes+=("$2"); shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --glibc) glibc=1; shift ;;
    --no-count) count=0; shift ;;
    --peer) peer="$2"; shift 2 ;;
    --peer-args) peer_args="$2"; shift 2 ;;
    --args) args="$2"; shift 2 ;;
    --idle-seconds) export OMO_BENCH_IDLE_S="$2"; shift 2 ;;
    --plain) export OMO_BENCH_PLAIN=1; shift ;;
    --latency-ms) export OMO_BENCH_LATENCY_MS="$2"; shift 2 ;;
    --cluster) cluster="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --instructions) instructions="$2"; shift 2 ;;
    --syscalls) syscalls="$2"; shift 2 ;;
    *) die "unknown argument $1 (--resources N, --bin PATH, --glibc, --no-count, --peer PATH, --peer-args ARGS, --args FLAGS, --idle-seconds S, --plain, --latency-ms MS, --cluster sim|real, --rounds N, --instructions N, --syscalls N)" ;;
  esac
done
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000 10000)
list=$(IFS=,; echo "${sizes[*]}")

label="ours, static musl"
if [[ -z $bin ]]; then
  say "Building what ships: the static musl binary"
  scripts/build-static.sh --out "$REPO/target/static" >/dev/null
  bin="$REPO/target/static/x86_64-unknown-linux-musl/release/openmed-operator"
else
  label="ours, $(basename "$bin")"
fi
[[ -x $bin ]] || die "$bin is not an executable"
if [[ $cluster == real ]]; then
  [[ ${#sizes[@]} == 1 ]] || die "--cluster real takes one --resources N"
  [[ -z $peer || -x $peer ]] || die "the peer $peer is not an executable (../shared/peer-kube-rs/README.md builds it)"
  scripts/control-plane.sh build
  say "Benchmark on the real control plane: $list models, $rounds round(s)"
  OMO_BENCH_RESOURCES="$list" OMO_BENCH_ROUNDS="$rounds" OMO_OPERATOR_BIN="$bin" \
    OMO_BENCH_PEER_BIN="$peer" OMO_BENCH_PEER_ARGS="$peer_args" \
    cargo test --locked --test real side_by_side -- --nocapture --test-threads 1 >"$REPO/target/bench-real.log" 2>&1 ||
    { grep '^measured: ' "$REPO/target/bench-real.log" || true
      die "the benchmark failed: target/bench-real.log"; }
  grep -E '^\||^measured' "$REPO/target/bench-real.log"
  exit 0
fi
count_bin=""
if ((count)); then
  say "Building the counting build (static musl, feature alloc-count)"
  scripts/build-static.sh --out "$REPO/target/static-count" --features alloc-count >/dev/null
  count_bin="$REPO/target/static-count/x86_64-unknown-linux-musl/release/openmed-operator"
fi
glibc_bin=""
say "Building the benchmark (release: kubesim, the glibc operator)"
cargo build --release --bin openmed-operator
((glibc)) && glibc_bin="$REPO/target/release/openmed-operator"
[[ -z $peer || -x $peer ]] || die "the peer $peer is not an executable (../shared/peer-kube-rs/README.md builds it)"
info "operator: $bin; $(nproc) cores; sizes: $list; ${OMO_BENCH_PLAIN:+plain HTTP}${OMO_BENCH_PLAIN:-TLS with bearer tokens}"
info "operator flags: ${args:-(defaults)}; peer: ${peer:-(none)} ${peer_args}"

say "Benchmark"
OMO_BENCH_RESOURCES="$list" OMO_BENCH_ROUNDS="$rounds" OMO_BENCH_INSTRUCTIONS="$instructions" OMO_BENCH_SYSCALLS="$syscalls" \
  OMO_OPERATOR_BIN="$bin" OMO_BENCH_LABEL="$label" OMO_BENCH_ARGS="$args" \
  OMO_BENCH_COUNT_BIN="$count_bin" OMO_BENCH_GLIBC_BIN="$glibc_bin" \
  OMO_BENCH_PEER_BIN="$peer" OMO_BENCH_PEER_ARGS="$peer_args" \
  cargo test --release --test bench -- --nocapture --test-threads 1 >"$REPO/target/bench.log" 2>&1 ||
  { grep '^measured: ' "$REPO/target/bench.log" || true
    die "the benchmark failed: target/bench.log (rows measured before it, above)"; }
grep -E '^\|' "$REPO/target/bench.log"

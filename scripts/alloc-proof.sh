#!/usr/bin/env bash
# The allocator's proof (docs/performance.md, "The allocator"): the cache of
# freed blocks (src/memory/cache.rs) is the static musl build's global
# allocator, so its stress test (tests/alloc/stress.rs) is built that way,
# with the feature memcheck (the cache announces its blocks to valgrind),
# then run natively, under valgrind's memcheck, and once writing to a freed
# block, which memcheck must report: the proof that it sees through the cache.
#   scripts/alloc-proof.sh [STEPS] [MEMCHECK_STEPS] [SEED]
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
steps=${1:-20000} checked_steps=${2:-3000} seed=${3:-24301}
command -v valgrind >/dev/null || die "valgrind is missing (scripts/install-deps.sh installs it)"

say "Building the stress test: static musl, the cache as global allocator, announced to memcheck"
scripts/build-static.sh --features memcheck --bin alloc-stress >/dev/null
bin="$REPO/target/static/x86_64-unknown-linux-musl/release/alloc-stress"
log="$REPO/target/alloc-proof.log"
memcheck=(valgrind --tool=memcheck -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite)

say "Natively, $steps steps a worker"
"$bin" "$steps" "$seed"

say "Under memcheck, $checked_steps steps a worker"
"${memcheck[@]}" "$bin" "$checked_steps" "$seed" >"$log" 2>&1 ||
  { tail -40 "$log"; die "memcheck found errors (above; all of it in $log)"; }
cat "$log"

say "A write to a freed block, kept by the cache: memcheck must report it"
if "${memcheck[@]}" "$bin" --use-after-free >"$log" 2>&1; then
  cat "$log"
  die "memcheck did not see a write to a block the cache keeps: the announcements (src/memory/memcheck.rs) do not reach it"
fi
if ! grep -q "Invalid write of size 1" "$log" || ! grep -q "inside a block of size 48 free'd" "$log"; then
  cat "$log"
  die "memcheck failed, but not on the write to the freed block"
fi
info "memcheck: $(grep -m1 "inside a block of size 48 free'd" "$log" | sed 's/^==[0-9]*== *//')"

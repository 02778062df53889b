#!/usr/bin/env bash
# Mutation testing of the pure core with cargo-mutants (crates.io): every
# mutant of src/reconcile/, src/model/, src/kube/guard.rs and
# src/kube/path.rs, tried against the tests that cover them (the library's
# unit tests, the reconcile, vectors, patches, readiness and client
# targets). Not part of CI: a whole run takes hours on two cores.
#
#   scripts/mutants.sh [--shard K/N] [--file GLOB]... [--re REGEX] [--tests "ARGS"]
#                      [--name DIR] [--iterate] [--list]
#
# --shard K/N runs the K-th of N shards (0-based), so that a run can be cut
# over several sittings; --file narrows it to some files (repeatable), --re
# to the mutants whose name matches; --iterate tries again only the ones
# the last run in the same DIR did not catch (after a test was added), with
# no unmutated baseline first;
# --tests gives the cargo test arguments instead (e.g. "--lib --test
# client" for the client's guards); --list prints the mutants and stops.
# Output goes to target/mutants/<DIR>/ (by default the shard, or "whole")
# (cargo-mutants' own mutants.out: caught.txt, missed.txt, timeout.txt,
# unviable.txt). docs/development.md ("Mutation testing") has the figures.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

MUTANTS_VERSION=27.1.0
shard="" list=0 tests="" name="" re=()
files=()
while (($#)); do
  case $1 in
    --shard) shard=${2:?--shard needs K/N}; shift 2 ;;
    --file) files+=("${2:?--file needs a glob}"); shift 2 ;;
    --tests) tests=${2:?--tests needs cargo test arguments}; shift 2 ;;
    --re) re+=(--re "${2:?--re needs a regex}"); shift 2 ;;
    --name) name=${2:?--name needs a directory name}; shift 2 ;;
    --iterate) re+=(--iterate --baseline=skip); shift ;;
    --list) list=1; shift ;;
    *) die "unknown flag $1 (flags: --shard K/N, --file GLOB, --re REGEX, --tests ARGS, --name DIR, --iterate, --list)" ;;
  esac
done
((${#files[@]})) || files=("src/reconcile/**/*.rs" "src/model/**/*.rs" "src/kube/guard.rs" "src/kube/path.rs")

if ! cargo mutants --version 2>/dev/null | grep -q "$MUTANTS_VERSION"; then
  say "Installing cargo-mutants $MUTANTS_VERSION"
  cargo install --locked --quiet cargo-mutants --version "$MUTANTS_VERSION"
fi

args=(--timeout 120 --build-timeout 300)
for f in "${files[@]}"; do args+=(--file "$f"); done
args+=("${re[@]}")
# The core's own tests, not the whole suite: the end-to-end targets
# start processes and take minutes, and test the shell, not these files.
test_args=(--lib --test reconcile --test vectors --test patches --test readiness --test client)
# shellcheck disable=SC2206 # cargo test arguments, split as a shell would
[[ -n $tests ]] && test_args=($tests)
if ((list)); then
  cargo mutants --list "${args[@]}"
  exit 0
fi
[[ -n $name ]] || name=${shard:-whole}
out="$REPO/target/mutants/${name//\//-of-}"
[[ -n $shard ]] && args+=(--shard "$shard")
mkdir -p "$out"
say "cargo mutants ${shard:+shard $shard }over ${files[*]}"
# The targets go to the build too (--cargo-arg), so that a mutant links
# only the binaries it is tried against; no debug info halves the link.
for a in "${test_args[@]}"; do args+=(--cargo-arg="$a"); done
set +e
# The library's tests of the shell that wait on clocks (certificate
# reloads, worker pools, leases) are left out: they take most of a
# mutant's test time and reach no file of the core.
CARGO_PROFILE_DEV_DEBUG=0 cargo mutants "${args[@]}" --output "$out" -- -- \
  --skip certificate:: --skip runtime::workers:: --skip controller::leader::
rc=$?
set -e
for k in caught missed timeout unviable; do
  printf '    %-9s %s\n' "$k" "$(wc -l <"$out/mutants.out/$k.txt" 2>/dev/null || echo 0)"
done
# cargo-mutants exits 2 when a mutant was missed, 3 on a timeout.
((rc == 0)) || die "cargo mutants exited $rc: see $out/mutants.out/missed.txt and timeout.txt"

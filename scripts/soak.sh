#!/usr/bin/env bash
# The randomized soak (tests/soak/) for longer than its CI
# budget, or to replay a seed: the real operator binary on the simulated
# cluster, seeded random operations and faults over three namespaces, every
# invariant checked at each quiet point. At the end it prints the seeds run,
# operations per minute, faults injected and invariants checked. A failure
# prints the seed, the operation log and the invariant that broke, and the
# script exits non-zero.
#
# Usage: scripts/soak.sh [--minutes N | --seconds N] [--seed S]
#                        [--seed-seconds N] [--release] [--keep-going]
#   --minutes N       total budget (default 1)
#   --seconds N       the same, in seconds
#   --seed S          replay seed S for the whole budget (one seed)
#   --seed-seconds N  length of each fresh seed (default 60)
#   --release         the release build (its LTO build takes minutes)
#   --keep-going      run every seed and report every broken invariant,
#                     instead of stopping at the first
# Needs: cargo. A 30-minute soak: scripts/soak.sh --minutes 30
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

seconds=60
seed=""
seed_seconds=60
release=0
keep_going=0
while (($#)); do
  case $1 in
    --minutes) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--minutes needs a whole number"; seconds=$(($2 * 60)); shift 2 ;;
    --seconds) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--seconds needs a whole number"; seconds=$2; shift 2 ;;
    --seed) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--seed needs a number"; seed=$2; shift 2 ;;
    --seed-seconds) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--seed-seconds needs a whole number"; seed_seconds=$2; shift 2 ;;
    --release) release=1; shift ;;
    --keep-going) keep_going=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
((seconds >= 10)) || die "a soak needs at least 10 seconds"

build_args=(test --test soak)
((release)) && build_args+=(--release)
cargo_args=("${build_args[@]}" -- --exact soak --nocapture)

export OMO_SOAK_SECONDS=$seconds OMO_SOAK_SEED_SECONDS=$seed_seconds
export OMO_SOAK_FRESH=1
[[ -n $seed ]] && export OMO_SOAK_SEED=$seed
((keep_going)) && export OMO_SOAK_KEEP_GOING=1

out="$(mktemp "${TMPDIR:-/tmp}/omo-soak.XXXXXX")"
trap 'rm -f "$out"' EXIT
if [[ -n $seed ]]; then
  say "Soak: seed $seed for $seconds s"
else
  say "Soak: $seconds s in fresh seeds of $seed_seconds s"
fi
cargo "${build_args[@]}" --no-run -q || die "cannot build the soak"
set +e
cargo "${cargo_args[@]}" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e

say "Soak figures"
awk '
  /^SOAK seed=/ {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] }
    seeds = seeds (seeds == "" ? "" : " ") substr($2, 6); n++
  }
  END {
    if (n == 0) { print "    no seed finished"; exit }
    minutes = v["seconds"] / 60
    printf "    seeds run:           %d (%s)\n", n, seeds
    printf "    time:                %.1f min\n", minutes
    printf "    operations:          %d (%d skipped as not applicable), %.1f per minute\n", v["ops"], v["skipped"], v["ops"] / minutes
    printf "    faults injected:     %d (%d operator kills), %.1f per minute\n", v["faults"], v["kills"], v["faults"] / minutes
    printf "    quiet points:        %d\n", v["quiet_points"]
    printf "    invariants checked:  %d\n", v["checks"]
    printf "    invariants broken:   %d\n", v["violations"]
  }' "$out"
((rc == 0)) || die "the soak broke an invariant (seed, operation log and invariant above)"
# A filter that matched no test also exits 0: no seed ran, nothing held.
grep -q '^SOAK seed=' "$out" || die "no seed ran (is the soak test still named soak?)"
info "every invariant held"

#!/usr/bin/env bash
# The story on the real control plane: build it (cached), check the alerts
# with its promtool (scripts/check-alerts.sh) and the Helm chart with its helm
# (scripts/check-chart.sh), start it, run the
# Rust target tests/real/ (each scenario also on kubesim, compared: the
# differential) with the static musl operator, then stop it; then the kubectl
# script (scripts/e2e-sim.sh --cluster real) on a plane of its own. A plane that
# cannot be built or started fails this stage; so does any test. When it
# fails, the tails of every component's log are printed and the logs kept
# in target/control-plane.
#
# Usage: scripts/real-e2e.sh [cargo test filter...]
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
export OMO_CP_DIR="$REPO/target/control-plane"
# shellcheck source=scripts/control-plane-lib.sh
source "$REPO/scripts/control-plane-lib.sh"

BIN="$REPO/target/static/x86_64-unknown-linux-musl/release/openmed-operator"
if [[ ! -x $BIN ]]; then
  info "building the static musl operator"
  scripts/build-static.sh >/dev/null
fi
cp_build
scripts/check-alerts.sh
scripts/check-chart.sh
# Pods warm up in 300 ms; versions matching 'unloadable' crash and never get ready.
cp_up --warmup-ms 300 --unloadable unloadable
ok=0
OMO_CONTROL_PLANE="$OMO_CP_DIR" OMO_OPERATOR_BIN="$BIN" \
  cargo test --locked --test real -- --test-threads=4 "$@" && ok=1
((ok)) && { scripts/check-custom-resources.sh || ok=0; }
if ((ok)); then
  cp_down
else
  cp_logs >&2
  for c in "${CP_COMPONENTS[@]}"; do cp_stop "$c"; done
  die "the story on the real control plane failed (logs kept in $OMO_CP_DIR)"
fi
# The kubectl script, on a plane of its own: it installs and deletes the CRD.
OPERATOR_BIN="$BIN" scripts/e2e-sim.sh --cluster real

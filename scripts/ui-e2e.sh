#!/usr/bin/env bash
# The live view in a real browser: kubesim, the operator with its
# view on 127.0.0.1, and tests/ui/view.test.mjs driving Debian's headless
# Chromium through playwright-core (pinned in tests/ui/package-lock.json;
# it downloads no browser). Screenshots and figures go to target/ui-e2e.
# Needs: chromium (apt-get install chromium), node and npm, kubectl.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
[[ -x /usr/bin/chromium ]] || die "/usr/bin/chromium missing: apt-get install chromium"
command -v npm >/dev/null || die "npm missing"
OUT="$REPO/target/ui-e2e"
rm -rf "$OUT"
mkdir -p "$OUT"
trap stop_all EXIT

say "playwright-core from tests/ui/package-lock.json"
(cd tests/ui && npm ci --no-audit --no-fund --silent)

say "kubesim and the operator, its live view on 127.0.0.1"
cargo build -q --bin openmed-operator -p openmed-operator
start_sim "$OUT/sim" --warmup-ms 500
kc apply -f manifests/base/crd.json >/dev/null
kc wait --for condition=established --timeout=20s crd/openmedmodels.openmed.ai >/dev/null
kc apply -f manifests/sample-deployment.yaml -f manifests/example-openmedmodel.yaml >/dev/null
start_operator "$OUT/operator.log" --server "$SIM_URL" --namespace openmed --health-addr 127.0.0.1:0 \
  --metrics-addr 127.0.0.1:0 --metrics-secure=false --ui-addr 127.0.0.1:0 --resync-seconds 5
wait_for 30 "the live view's address" grep -q "live view on http://" "$OUT/operator.log"
VIEW_URL=$(grep -o 'live view on http://[0-9.:]*/' "$OUT/operator.log" | head -1 | cut -d' ' -f4)
info "view: $VIEW_URL"

say "Chromium: list, roll out, fail and roll back, delete"
VIEW_URL="$VIEW_URL" SIM_URL="$SIM_URL" OUT="$OUT" node tests/ui/view.test.mjs
stop_operator
info "screenshots: $(find "$OUT" -maxdepth 1 -name '*.png' -printf '%f ' | sort)"
say "ui-e2e: passed"

#!/usr/bin/env bash
# The custom resources the repository ships (the example OpenMedModel, the
# ServiceMonitor and the PrometheusRule) against their CRDs on the real API
# server: kubectl apply --dry-run=server --validate=strict, after installing
# prometheus-operator's CRDs from its Go module (pinned by version and hash).
# kubernetes-validate has no schema for them and lets them pass with a
# warning (scripts/check-manifests.sh); here each must be accepted, and a
# broken copy of each refused, naming the field. Needs the plane up in
# OMO_CP_DIR (scripts/real-e2e.sh runs it there).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
export OMO_CP_DIR=${OMO_CP_DIR:-$REPO/target/control-plane}
# shellcheck source=scripts/control-plane-lib.sh
source "$REPO/scripts/control-plane-lib.sh"
eval "$(cp_env)"
cp_go_env

PROM_OPERATOR=v0.85.0
PROM_OPERATOR_SUM=h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s=
say "prometheus-operator $PROM_OPERATOR's CRDs (from the Go module proxy)"
GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR" >"$OMO_CP_DIR/prom-operator.json" ||
  die "cannot download github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR"
read -r dir sum < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["Dir"], d["Sum"])' "$OMO_CP_DIR/prom-operator.json")
[[ $sum == "$PROM_OPERATOR_SUM" ]] || die "prometheus-operator $PROM_OPERATOR hashes to $sum, not $PROM_OPERATOR_SUM"

k() { "$OMO_CP_KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
crds="$dir/example/prometheus-operator-crd"
k apply --server-side -f "$crds/monitoring.coreos.com_servicemonitors.yaml" \
  -f "$crds/monitoring.coreos.com_prometheusrules.yaml" >/dev/null
k wait --for condition=established --timeout=60s crd/servicemonitors.monitoring.coreos.com \
  crd/prometheusrules.monitoring.coreos.com crd/openmedmodels.openmed.ai >/dev/null
for ns in openmed openmed-system; do
  k create namespace "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null
done

# dry_run FILE: the server's verdict on FILE, strict about unknown fields.
dry_run() { k apply --dry-run=server --validate=strict -f "$1" 2>&1; }

out="$OMO_CP_DIR/custom-resources"
mkdir -p "$out"
# Each shipped resource, then a copy broken by a sed expression, and the
# words the refusal must contain.
checks=(
  "manifests/example-openmedmodel.yaml|s/^  replicas: 2$/  replicas: two/|spec.replicas"
  "manifests/monitoring/servicemonitor.yaml|s/^    - port: https-metrics$/    - port: https-metrics\n      scrapeEvery: 30s/|scrapeEvery"
  "manifests/monitoring/prometheusrule.yaml|0,/^        - alert: /s//        - alrt: /|alrt"
)
for c in "${checks[@]}"; do
  IFS='|' read -r file broken field <<<"$c"
  verdict=$(dry_run "$file") || die "the API server refused $file: $verdict"
  sed "$broken" "$file" >"$out/broken.yaml"
  cmp -s "$file" "$out/broken.yaml" && die "the broken copy of $file is not broken ($broken)"
  if verdict=$(dry_run "$out/broken.yaml"); then
    die "the API server accepted a broken copy of $file: $verdict"
  fi
  [[ $verdict == *"$field"* ]] || die "a broken $file was refused for another reason: $verdict"
  info "$file accepted; broken ($field) refused"
done

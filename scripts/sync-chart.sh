#!/usr/bin/env bash
# The Helm chart's copies of what manifests/ holds, written from the one
# source, and checked:
#   manifests/base/crd.json                  -> charts/openmed-operator/files/crd.json
#   manifests/monitoring/prometheusrule.yaml -> charts/openmed-operator/files/prometheusrule.yaml
#   manifests/components/tenant-policy/policy.yaml
#                                            -> charts/openmed-operator/files/tenant-policy.yaml
#   Cargo.toml `version`                     -> Chart.yaml appVersion
#   scripts/chart-schema.py                  -> values.schema.json
# Helm's .Files.Get reads only files inside the chart, and kustomize refuses
# a resource file outside its root, so neither can point at the other: one
# is the source (manifests/, which the tests include_str!) and this script
# keeps the copies byte-identical.
#   scripts/sync-chart.sh          write the copies
#   scripts/sync-chart.sh --check  change nothing; fail naming each stale copy
#                                  (run by scripts/check-manifests.sh)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

CHART=charts/openmed-operator
check=false
[[ ${1:-} == --check ]] && check=true

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[[ -n $version ]] || die "no version in Cargo.toml"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp manifests/base/crd.json "$tmp/crd.json"
cp manifests/monitoring/prometheusrule.yaml "$tmp/prometheusrule.yaml"
cp manifests/components/tenant-policy/policy.yaml "$tmp/tenant-policy.yaml"
sed "s/^appVersion: .*/appVersion: \"$version\"/" "$CHART/Chart.yaml" >"$tmp/Chart.yaml"
python3 scripts/chart-schema.py "$tmp/values.schema.json"

stale=()
for f in files/crd.json files/prometheusrule.yaml files/tenant-policy.yaml Chart.yaml values.schema.json; do
  if ! cmp -s "$tmp/$(basename "$f")" "$CHART/$f"; then
    stale+=("$CHART/$f")
    $check || cp "$tmp/$(basename "$f")" "$CHART/$f"
  fi
done

if $check; then
  ((${#stale[@]} == 0)) || die "stale, run scripts/sync-chart.sh: ${stale[*]}"
  info "the chart's CRD, alerts, tenant policy, appVersion ($version) and schema match their sources"
else
  info "wrote ${#stale[@]} file(s)${stale:+: ${stale[*]}}"
fi

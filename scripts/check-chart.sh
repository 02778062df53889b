#!/usr/bin/env bash
# The Helm chart (charts/openmed-operator), checked with the helm the tools
# module pins (tests/control-plane/helm):
# - its copies of manifests/ match their sources (scripts/sync-chart.sh --check);
# - `helm lint --strict` with the defaults and with each values file in ci/;
# - parity: `helm template` with the defaults renders what `kubectl kustomize
#   manifests/` renders, with ci/namespaced-values.yaml what the namespaced
#   overlay renders, and with ci/tenant-policy-values.yaml what manifests/
#   with the component components/tenant-policy renders, object by object and field by field, Helm's
#   own labels and the release's Namespace aside (scripts/chart-parity.py);
# - every render is valid against the upstream schemas (kubernetes-validate);
# - values the schema must refuse are refused, naming the key.
#
# Usage: scripts/check-chart.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
# shellcheck source=scripts/control-plane-lib.sh
source "$REPO/scripts/control-plane-lib.sh"

CHART=charts/openmed-operator
cp_build >/dev/null
helm="$(cp_bin_dir helm)/helm"
kubectl="$(cp_bin_dir kubernetes)/kubectl"
[[ -x $helm && -x $kubectl ]] || die "no helm or kubectl from the tools modules"
info "$("$helm" version --short)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

scripts/sync-chart.sh --check

say "helm lint --strict"
"$helm" lint --strict "$CHART" >"$out/lint.txt" || { cat "$out/lint.txt"; die "helm lint failed (defaults)"; }
for values in "$CHART"/ci/*.yaml; do
  "$helm" lint --strict "$CHART" -f "$values" >"$out/lint.txt" ||
    { cat "$out/lint.txt"; die "helm lint failed ($values)"; }
  "$helm" template openmed-operator "$CHART" -n openmed-system -f "$values" >/dev/null ||
    die "helm template failed ($values)"
  info "$values: lint and template"
done

say "Parity with kustomize"
python3 scripts/chart-parity.py --self-test
render() {
  "$helm" template openmed-operator "$CHART" -n openmed-system "$@"
}
render >"$out/helm.yaml" || die "helm template failed (defaults)"
"$kubectl" kustomize manifests/ >"$out/kustomize.yaml"
python3 scripts/chart-parity.py "$out/helm.yaml" "$out/kustomize.yaml" ||
  die "the chart's defaults and manifests/ differ"
render -f "$CHART/ci/namespaced-values.yaml" >"$out/helm-ns.yaml" || die "helm template failed (namespaced)"
"$kubectl" kustomize manifests/overlays/namespaced >"$out/kustomize-ns.yaml"
python3 scripts/chart-parity.py "$out/helm-ns.yaml" "$out/kustomize-ns.yaml" ||
  die "the chart's namespaced values and manifests/overlays/namespaced differ"
render -f "$CHART/ci/tenant-policy-values.yaml" >"$out/helm-tp.yaml" || die "helm template failed (tenant policy)"
# kustomize takes resources and components only by relative path.
mkdir -p target/tmp/tenant-policy
printf 'resources: [../../../manifests]\ncomponents: [../../../manifests/components/tenant-policy]\n' \
  >target/tmp/tenant-policy/kustomization.yaml
"$kubectl" kustomize target/tmp/tenant-policy >"$out/kustomize-tp.yaml"
python3 scripts/chart-parity.py "$out/helm-tp.yaml" "$out/kustomize-tp.yaml" ||
  die "the chart's tenant policy and manifests/components/tenant-policy differ"

say "What the chart renders, against the upstream Kubernetes schemas"
for values in "$CHART"/ci/*.yaml; do
  render -f "$values" >"$out/ci-$(basename "$values")"
done
"$(kubernetes_validate_env)/bin/kubernetes-validate" --strict --quiet -k 1.37.0 \
  "$out/helm.yaml" "$out/helm-ns.yaml" "$out/kustomize-tp.yaml" "$out"/ci-*.yaml || die "a render of the chart is not valid"
# The oldest Kubernetes the installs support (scripts/check-manifests.sh,
# docs/install.md "Compatibility"); the tenant policy needs 1.30 and says so.
"$(kubernetes_validate_env)/bin/kubernetes-validate" --strict --quiet -k 1.25.0 \
  "$out/helm.yaml" "$out/helm-ns.yaml" || die "the chart's defaults are not valid on Kubernetes 1.25"
info "valid on Kubernetes 1.37, the defaults and namespaced values on 1.25 too (custom resources: scripts/check-custom-resources.sh)"

say "Values the schema refuses"
refused() {
  local what=$1 word=$2
  shift 2
  if render "$@" >/dev/null 2>"$out/err.txt"; then
    die "$what was accepted"
  fi
  grep -q -- "$word" "$out/err.txt" || { cat "$out/err.txt"; die "$what was refused without naming $word"; }
  info "$what: refused, naming $word"
}
refused "an unknown key" replica --set replica=3
refused "a string for replicas" replicas --set-string replicas=3
refused "an unknown key under image" image --set image.registry=x
refused "a negative qps" qps --set qps=-1
refused "a tenant namespace that is no namespace name" Bad \
  --set tenantPolicy.enabled=true --set tenantPolicy.namespaces.Bad.maxReplicas=1
refused "a tier the CRD does not know" tiers \
  --set tenantPolicy.enabled=true --set "tenantPolicy.namespaces.a.tiers={Huge}"
refused "the tenant policy before Kubernetes 1.30" "1.30" \
  --set tenantPolicy.enabled=true --kube-version 1.29.0

#!/usr/bin/env bash
# Check every manifest, and what Kustomize renders from them, against the
# upstream Kubernetes schemas with kubernetes-validate (from PyPI, installed
# into target/pyenv on first use), then install both renderings on the
# simulated API server, which refuses a CRD that is not a structural schema as
# kube-apiserver does (kubesim's structural.rs). kubernetes-validate has no
# schema for a custom resource and passes it with a warning: the example
# OpenMedModel, the ServiceMonitor and the PrometheusRule are checked against
# their CRDs on the real API server (scripts/check-custom-resources.sh).
# Needs: python3, kubectl (for `kubectl kustomize`, offline). Takes seconds
# after the first install.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

# The oldest Kubernetes the manifests support and the newest we check them
# against (docs/install.md, "Compatibility"): 1.25 is the first release that runs the
# CRD's CEL rule (x-kubernetes-validations) by default.
K8S_OLDEST=1.25.0
K8S_NEWEST=1.37.0
VENV=$(kubernetes_validate_env)

OUT="$REPO/target/rendered"
mkdir -p "$OUT"
kubectl kustomize manifests/ >"$OUT/cluster-wide.yaml"
kubectl kustomize manifests/overlays/namespaced >"$OUT/namespaced.yaml"
kubectl kustomize manifests/overlays/example-image >"$OUT/example-image.yaml"
installs=("$OUT/cluster-wide.yaml" "$OUT/namespaced.yaml" "$OUT/example-image.yaml")

mapfile -t files < <(find manifests -name '*.yaml' ! -name kustomization.yaml -o -name '*.json' | sort)
for k8s in "$K8S_OLDEST" "$K8S_NEWEST"; do
  say "kubernetes-validate --strict against Kubernetes $k8s"
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$k8s" "${files[@]}" "${installs[@]}"
done

# The validator must be able to fail: a broken Deployment is refused.
printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: "two"}\n' >"$OUT/broken.yaml"
if "$VENV/bin/kubernetes-validate" --quiet -k "$K8S_NEWEST" "$OUT/broken.yaml" >/dev/null 2>&1; then
  die "kubernetes-validate accepted a broken manifest"
fi
info "${#files[@]} files and ${#installs[@]} rendered installs valid on $K8S_OLDEST and $K8S_NEWEST"

say "Labels, user roles, images and the namespaced overlay's one parameter"
rm -rf "$OUT/param" && mkdir -p "$OUT/param" && cp -r manifests "$OUT/param/"
sed -i 's/^  namespace: openmed$/  namespace: team-a/' "$OUT/param/manifests/overlays/namespaced/scope.yaml"
kubectl kustomize "$OUT/param/manifests/overlays/namespaced" >"$OUT/namespaced-team-a.yaml"
"$VENV/bin/python" scripts/check-installs.py "$OUT"

say "Both installs on the simulated API server (structural CRD schemas, as kube-apiserver)"
trap stop_all EXIT
start_sim "$OUT/sim"
# The namespaced install first, on an empty cluster: it creates the namespace
# it watches (it used to fail half way without it).
for install in namespaced cluster-wide; do
  kc apply -f "$OUT/$install.yaml" >"$OUT/$install.applied" 2>&1 || {
    cat "$OUT/$install.applied" >&2
    die "the $install install was refused"
  }
done
# The check must be able to fail: the int-or-string form a real server refused.
python3 - "$REPO/manifests/base/crd.json" >"$OUT/crd-nonstructural.json" <<'PY'
import json, sys
crd = json.load(open(sys.argv[1]))
crd["spec"]["group"] = "nonstructural.example"
crd["metadata"]["name"] = crd["spec"]["names"]["plural"] + ".nonstructural.example"
for v in crd["spec"]["versions"]:
    s = v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rolloutStrategy"]["properties"]
    s["maxSurge"]["anyOf"] = [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+%$"}]
print(json.dumps(crd))
PY
if kc apply -f "$OUT/crd-nonstructural.json" >"$OUT/refused.txt" 2>&1; then
  die "kubesim accepted a CRD that is not a structural schema"
fi
grep -q 'anyOf\[0\].type: Forbidden: must be empty to be structural' "$OUT/refused.txt" ||
  die "kubesim refused the non-structural CRD for another reason: $(cat "$OUT/refused.txt")"
info "CRDs accepted; a non-structural one refused"

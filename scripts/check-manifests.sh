#!/usr/bin/env bash
# Check every manifest, and what Kustomize renders from them, against the
# upstream Kubernetes schemas with kubernetes-validate (from PyPI, installed
# into target/pyenv on first use). Custom resources are checked against the
# CRD by the simulated API server in e2e-sim.sh.
# Needs: python3, kubectl (for `kubectl kustomize`, offline). Takes seconds
# after the first install.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

KV_VERSION=1.37.0
K8S_VERSION=1.32.0
VENV="$REPO/target/pyenv"
if ! "$VENV/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  say "Installing kubernetes-validate $KV_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "kubernetes-validate==$KV_VERSION"
fi

OUT="$REPO/target/rendered"
mkdir -p "$OUT"
kubectl kustomize manifests/ >"$OUT/cluster-wide.yaml"
kubectl kustomize manifests/overlays/namespaced >"$OUT/namespaced.yaml"

mapfile -t files < <(find manifests -name '*.yaml' ! -name kustomization.yaml -o -name '*.json' | sort)
say "kubernetes-validate --strict against Kubernetes $K8S_VERSION"
"$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "${files[@]}" "$OUT/cluster-wide.yaml" "$OUT/namespaced.yaml"

# The validator must be able to fail: a broken Deployment is refused.
printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: "two"}\n' >"$OUT/broken.yaml"
if "$VENV/bin/kubernetes-validate" --quiet -k "$K8S_VERSION" "$OUT/broken.yaml" >/dev/null 2>&1; then
  die "kubernetes-validate accepted a broken manifest"
fi
info "${#files[@]} files and 2 rendered installs valid"

#!/usr/bin/env bash
# The same scenario as e2e-sim.sh on a real Kubernetes cluster (kind):
# create a cluster, load the image archive scripts/image.sh makes (no
# container engine: IMAGE_ARCHIVE names a carried one, else it is built with
# scripts/build-static.sh and scripts/image.sh), install
# the cluster-wide manifests through an `images:` overlay, deploy a stand-in OpenMed service whose
# readiness depends on the preload value, run the shared scenario
# (scenario.sh), tear down.
# Needs: kind and kubectl (and, without IMAGE_ARCHIVE, what the static
# build needs); network access for the stand-in service's busybox image.
# About 5 minutes. It cannot run on the CI machines (no kind); the suite
# lints it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/scenario.sh
source "$REPO/scripts/scenario.sh"

for tool in kind kubectl; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
CLUSTER="${CLUSTER:-openmed-e2e}"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -1)
IMAGE="openmed-operator:$VERSION"

say "Creating kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 180s
trap 'kind delete cluster --name "$CLUSTER"' EXIT
kubectl config use-context "kind-$CLUSTER"

if [[ -z ${IMAGE_ARCHIVE:-} ]]; then
  say "Building the static binary and the image archive (no container engine)"
  "$REPO/scripts/build-static.sh"
  # The name containerd and the kubelet resolve "openmed-operator:<version>" to.
  IMAGE_NAME=docker.io/library/openmed-operator "$REPO/scripts/image.sh"
  IMAGE_ARCHIVE="$REPO/target/image/openmed-operator-$VERSION.oci.tar"
fi
say "Loading $IMAGE_ARCHIVE into the cluster"
kind load image-archive "$IMAGE_ARCHIVE" --name "$CLUSTER"

say "Installing the cluster-wide manifests with the image set by an overlay (as docs/install.md says)"
OVERLAY="$REPO/target/kind-overlay"
mkdir -p "$OVERLAY"
cat >"$OVERLAY/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
components:
  - ../../manifests/components/standard-labels
resources:
  - ../../manifests/base
  - ../../manifests/rbac
images:
  - name: ghcr.io/openmed-ai/openmed-operator
    newName: ${IMAGE%%:*}
    newTag: ${IMAGE##*:}
YAML
kc apply -k "$OVERLAY"
kc wait --for condition=established --timeout=60s crd/openmedmodels.openmed.ai
kc -n openmed-system rollout status deployment/openmed-operator --timeout=180s

say "Deploying a stand-in OpenMed service (busybox; a version containing 'unloadable' never gets ready)"
kc apply -f - <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: openmed
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: openmed-service
  namespace: openmed
  labels:
    openmed.ai/managed-target: "true"
spec:
  replicas: 1
  selector:
    matchLabels: {app: openmed-service}
  template:
    metadata:
      labels: {app: openmed-service}
    spec:
      containers:
        - name: openmed-service
          image: busybox:1.36
          command: ["sh", "-c", "echo serving \"$OPENMED_SERVICE_PRELOAD_MODELS\"; exec sleep 86400"]
          env:
            - name: OPENMED_SERVICE_PRELOAD_MODELS
              value: ""
          readinessProbe:
            exec:
              command: ["sh", "-c", "case \"$OPENMED_SERVICE_PRELOAD_MODELS\" in *unloadable*) exit 1;; esac"]
            periodSeconds: 2
YAML
kc -n openmed rollout status deployment/openmed-service --timeout=180s

NS=openmed
TIMEOUT=240
BAD_DEADLINE=40
scenario_all
say "kind-e2e: all passed"
kc -n openmed-system logs deployment/openmed-operator --tail=30

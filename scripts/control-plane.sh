#!/usr/bin/env bash
# The real control plane the suite is judged on: etcd, kube-apiserver and
# kube-controller-manager built from their Go modules (tests/control-plane/),
# started on loopback over TLS with RBAC and an audit log, and kubesim's
# kubelet stand-in to bind pods and report their status.
#
# Usage:
#   scripts/control-plane.sh build        build each tool set (cached by its go.sum); print versions and times
#   scripts/control-plane.sh up [--unloadable REGEX] [--warmup-ms N]
#                                         start it; wait for /readyz; print the kubeconfig
#   scripts/control-plane.sh env          print what the tests read (OMO_CONTROL_PLANE, KUBECONFIG, ...)
#   scripts/control-plane.sh stop|start COMPONENT
#                                         etcd, apiserver, controller-manager or kubelet; state kept
#   scripts/control-plane.sh logs         the tails of every component's log
#   scripts/control-plane.sh lint         gofmt and go vet over our Go code (the kubelet stand-in)
#   scripts/control-plane.sh down         stop what `up` started, by process id, and remove its files
#
# OMO_CP_DIR is where a running plane keeps its files (default target/control-plane);
# OMO_CP_CACHE where built binaries are kept (default ~/.cache/openmed-operator/control-plane).
# OMO_CP_KCM_QPS raises kube-controller-manager's API limits and syncs (the benchmark's 1,000 models).
# Only Go modules are downloaded, through the module proxy (GOTOOLCHAIN=local, -mod=readonly).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/control-plane-lib.sh
source "$REPO/scripts/control-plane-lib.sh"

case ${1:-} in
  build) cp_build ;;
  up)
    shift
    cp_up "$@"
    ;;
  env) cp_env ;;
  stop | start)
    [[ -n ${2:-} ]] || die "usage: scripts/control-plane.sh $1 etcd|apiserver|controller-manager|kubelet"
    "cp_$1" "$2"
    ;;
  logs) cp_logs ;;
  lint) cp_lint ;;
  down) cp_down ;;
  *) die "usage: scripts/control-plane.sh build|up|env|stop|start|logs|lint|down (see the header of this script)" ;;
esac

#!/usr/bin/env bash
# The quickstart: run the operator against the bundled simulated cluster.
# Starts kubesim, installs manifests/ (CRD, RBAC, ...) and a sample
# Deployment, starts the operator with its ServiceAccount's token (so the
# shipped RBAC is what it runs under), and shows the example OpenMedModel
# reaching Ready, a v2 rollout, an automatic rollback of an unloadable
# version, and /metrics scraped over TLS with a token, as Prometheus does.
#
# Usage: scripts/demo.sh [--cluster sim|real] [--keep | --stop]
#   --cluster real  run it on the real control plane instead (etcd,
#           kube-apiserver and kube-controller-manager built from their Go
#           modules by scripts/control-plane.sh: about 11 minutes the first
#           time, then cached; Go at /usr/local/go).
#   --keep  leave the cluster and the operator running afterwards,
#           and print how to point kubectl at them.
#   --stop  stop a kept demo, and nothing else.
# A new run first stops a demo an earlier --keep left running (it knows its
# PIDs from target/demo.pids), so two never share a directory.
# Needs: cargo, kubectl. The first run builds for about 3 minutes on 2 cores;
# then ~30 s.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/scenario.sh
source "$REPO/scripts/scenario.sh"
KEEP=0 CLUSTER=sim
while (($#)); do
  case $1 in
    --keep) KEEP=1 ;;
    --stop) STOP=1 ;;
    --cluster) CLUSTER=${2:-} && shift ;;
    *) die "usage: scripts/demo.sh [--cluster sim|real] [--keep | --stop]" ;;
  esac
  shift
done
[[ $CLUSTER == sim || $CLUSTER == real ]] || die "--cluster: sim or real"
PIDS_FILE="$REPO/target/demo.pids"

# stop_kept: end the kubesim and operator a kept demo left running; only
# processes that are still ours (their command line names our binaries).
stop_kept() {
  if [[ -s $REPO/target/demo/control-plane/env ]]; then
    info "stopping the kept demo's real control plane"
    OMO_CP_DIR="$REPO/target/demo/control-plane" "$REPO/scripts/control-plane.sh" down
  fi
  [[ -s $PIDS_FILE ]] || return 1
  local pid pids=() listed=()
  read -r -a listed <"$PIDS_FILE" || true
  for pid in "${listed[@]}"; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE 'target/debug/(kubesim|openmed-operator)'; then
      pids+=("$pid")
    fi
  done
  rm -f "$PIDS_FILE"
  ((${#pids[@]})) || return 1
  info "stopping the kept demo (PIDs ${pids[*]})"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local end=$((SECONDS + 10))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  return 0
}

if [[ ${STOP:-} == 1 ]]; then
  say "Stopping the kept demo"
  stop_kept || info "no kept demo is running"
  exit 0
fi
if [[ -s $PIDS_FILE ]]; then
  say "A demo kept with --keep is still running: stopping it first"
  stop_kept || info "it had already stopped"
fi

say "Building the operator and the simulated API server"
[[ $CLUSTER == sim ]] || "$REPO/scripts/control-plane.sh" build
(cd "$REPO" && cargo build --bin openmed-operator -p openmed-operator && cargo build -p kubesim --bins)

WORK="$REPO/target/demo"
rm -rf "$WORK"
mkdir -p "$WORK"
((KEEP)) || trap 'stop_all' EXIT

sa_token="demo-operator-$RANDOM$RANDOM"
if [[ $CLUSTER == real ]]; then
  say "Starting the real control plane (pods warm up in 1 s; versions containing 'unloadable' crash and never get ready)"
  export OMO_CP_DIR="$WORK/control-plane"
  # shellcheck source=scripts/control-plane-lib.sh
  source "$REPO/scripts/control-plane-lib.sh"
  # cp_down first: stop_all waits for every child, and the plane's are children here.
  ((KEEP)) || trap 'cp_down; stop_all' EXIT
  cp_up --warmup-ms 1000
  export KUBECONFIG="$OMO_CP_DIR/admin.kubeconfig" KC_CACHE="$WORK/kube-cache"
  KUBECTL="$(cp_bin_dir kubernetes)/kubectl"
  export KUBECTL
  server=$(sed -n 's/^OMO_CP_SERVER=//p' "$OMO_CP_DIR/env")
  ca=(--ca-file "$OMO_CP_DIR/pki/ca.crt")
else
  say "Starting the simulated cluster (pods warm up in 1 s; versions containing 'unloadable' never get ready)"
  start_sim "$WORK/cluster" --warmup-ms 1000 --sa-token "openmed-system/openmed-operator=$sa_token"
  server=$SIM_URL ca=()
fi
info "API server: $server"
kc apply -k "$REPO/manifests/" >/dev/null
kc wait --for condition=established --timeout=20s crd/openmedmodels.openmed.ai
kc apply -f "$REPO/manifests/sample-deployment.yaml"
if [[ $CLUSTER == real ]]; then
  # The shipped Deployment's image cannot run here: this script runs the operator itself, as its ServiceAccount.
  kc -n openmed-system scale deployment/openmed-operator --replicas=0 >/dev/null
  sa_token=$(kc -n openmed-system create token openmed-operator --duration=2h)
fi

say "Starting the operator as its ServiceAccount, under the shipped RBAC"
printf '%s' "$sa_token" >"$WORK/sa-token"
start_operator "$WORK/operator.log" --server "$server" --token-file "$WORK/sa-token" "${ca[@]}" \
  --health-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --ui-addr 127.0.0.1:0
wait_for 30 "the operator to sync" grep -q "caches synced" "$WORK/operator.log"
grep "starting" "$WORK/operator.log" | sed 's/^/    /'

NS=openmed
TIMEOUT=90
BAD_DEADLINE=5
scenario_ready
scenario_v2
scenario_rollback

say "Events on the OpenMedModel"
kc -n "$NS" get events --field-selector involvedObject.kind=OpenMedModel
say "What the operator logged"
grep -E "openmed/openmed-service" "$WORK/operator.log" | sed 's/^/    /'

say "/metrics over TLS: only for a token allowed get on /metrics"
prom_token=$(prometheus_token)
metrics_url=$(metrics_url "$WORK/operator.log")
code=$(curl -sk -o /dev/null -w '%{http_code}' "$metrics_url/metrics" || true)
info "no token: $code"
info "Prometheus's token (monitoring/prometheus-k8s, bound to openmed-operator-metrics-reader):"
curl -sk -H "Authorization: Bearer $prom_token" "$metrics_url/metrics" |
  grep -E '^openmed_operator_(managed_resources|reconciles_total)' | sed 's/^/    /'

if ((KEEP)); then
  say "Left running. Try:"
  info "export KUBECONFIG=$KUBECONFIG"
  [[ $CLUSTER == sim ]] || info "use the release's own kubectl, $KUBECTL (the machine's may be outside the version skew)"
  info "kubectl get omm -A; kubectl -n openmed describe omm openmed-service"
  info "metrics: curl -k -H \"Authorization: Bearer \$(kubectl create token prometheus-k8s -n monitoring)\" $metrics_url/metrics"
  info "live view: $(grep -o 'live view on http://[0-9.:]*/' "$WORK/operator.log" | sed -n '1s/live view on //p')"
  info "operator log: $WORK/operator.log"
  info "stop with: scripts/demo.sh --stop (PIDs $OP_PID ${SIM_PIDS[*]})"
  echo "$OP_PID ${SIM_PIDS[*]}" >"$PIDS_FILE"
  trap - EXIT
else
  stop_operator
  say "Done. Run 'scripts/demo.sh --keep' to keep the cluster up and explore with kubectl."
fi

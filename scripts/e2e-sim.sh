#!/usr/bin/env bash
# End to end on the simulated cluster, with the real kubectl:
#  1. kubectl against kubesim, plain and TLS+token: CRD, custom resource
#     apply/get/patch/annotate/wait/describe/explain/delete, kubectl's
#     protobuf generators (create namespace, configmap, token, ...), a Deployment's
#     `rollout status` and `history`, its ReplicaSets and pods, schema
#     violations rejected with their field path;
#  2. the manifests: `kubectl apply -k manifests/` and the namespaced overlay;
#  3. the operator binary through the shared scenario (scenario.sh);
#  4. scripts/demo.sh run twice with --keep, then --stop.
# With --cluster real, steps 1 to 3 run on a real control plane of their own
# (scripts/control-plane.sh, in target/control-plane-e2e) with its release's
# kubectl; the operator's refusals are read from its audit log.
# Needs: cargo, kubectl. Takes about a minute after the build.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/scenario.sh
source "$REPO/scripts/scenario.sh"

CLUSTER=sim
case ${1:-} in
  --cluster) CLUSTER=${2:?--cluster needs sim or real} ;;
  "") ;;
  *) die "usage: scripts/e2e-sim.sh [--cluster sim|real]" ;;
esac
[[ $CLUSTER == sim || $CLUSTER == real ]] || die "--cluster: sim or real, not $CLUSTER"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/omo-e2e.XXXXXX")"
# Stops a demo kept with --keep too (step 4 runs and stops its own).
trap 'stop_all; "$REPO/scripts/demo.sh" --stop >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
(cd "$REPO" && cargo build -q -p kubesim --bins && cargo build -q --bin openmed-operator)

# kubectl's generators post protobuf; each one works, and in TLS mode the
# token `kubectl create token` issues acts as its service account under the
# built-in roles it is bound to.
generator_checks() {
  local mode=$1 token err
  kc create namespace kc-gen >/dev/null || die "kubectl create namespace failed"
  kc -n kc-gen create configmap c1 --from-literal=a=b >/dev/null || die "kubectl create configmap failed"
  [[ $(kc -n kc-gen get cm c1 -o 'jsonpath={.data.a}') == b ]] || die "kubectl create configmap lost its data"
  kc -n kc-gen create serviceaccount bot >/dev/null || die "kubectl create serviceaccount failed"
  kc -n kc-gen create rolebinding bot-edit --clusterrole=edit --serviceaccount=kc-gen:bot >/dev/null \
    || die "kubectl create rolebinding failed"
  kc create clusterrolebinding kc-gen-view --clusterrole=view --serviceaccount=kc-gen:bot >/dev/null \
    || die "kubectl create clusterrolebinding failed"
  kc -n kc-gen create token default >/dev/null || die "kubectl create token default failed"
  token=$(kc -n kc-gen create token bot) || die "kubectl create token failed"
  [[ -n $token ]] || die "kubectl create token printed no token"
  if [[ $mode == tls* || $mode == real ]]; then
    # As the token alone: on the real cluster the admin's kubeconfig carries a client certificate, which
    # the API server would authenticate first.
    as_token() { KUBECONFIG="${TOKEN_KUBECONFIG:-$KUBECONFIG}" kc --token "$token" "$@"; }
    as_token -n kc-gen create configmap c2 --from-literal=x=y >/dev/null \
      || die "the service account bound to edit could not create a ConfigMap in its namespace"
    err=$(as_token -n default create configmap c3 --from-literal=x=y 2>&1 || true)
    [[ $err == *forbidden*system:serviceaccount:kc-gen:bot* ]] \
      || die "view alone should not let the service account write elsewhere: $err"
  fi
  kc delete clusterrolebinding kc-gen-view >/dev/null
  kc delete namespace kc-gen --timeout=20s >/dev/null
}

kubectl_checks() {
  local mode=$1
  say "kubectl against the $CLUSTER cluster ($mode)"
  kc version -o json >/dev/null
  kc apply -f "$REPO/manifests/base/crd.json"
  kc wait --for condition=established --timeout=20s crd/openmedmodels.openmed.ai
  kc api-resources --api-group=openmed.ai | grep omm >/dev/null || die "short name omm not discovered"
  kc apply -f - <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: kc-check
YAML
  kc -n kc-check apply -f - <<'YAML'
apiVersion: openmed.ai/v1alpha1
kind: OpenMedModel
metadata:
  name: check
spec:
  family: PII
  version: OpenMed/x-v1
  tier: Small
  replicas: 1
  rolloutStrategy:
    type: Recreate
YAML
  local header
  # sed, not head: head exits early and kubectl can die of SIGPIPE.
  header=$(kc -n kc-check get omm | sed -n 1p)
  for col in FAMILY TIER DESIRED ACTIVE PHASE READY AGE; do
    [[ $header == *"$col"* ]] || die "printer column $col missing from: $header"
  done
  [[ $(kc -n kc-check get omm check -o 'jsonpath={.spec.rolloutStrategy.progressDeadlineSeconds}') == 600 ]] \
    || die "CRD defaults not applied"
  kc -n kc-check patch omm check --type=merge -p '{"spec":{"replicas":3}}'
  kc -n kc-check patch omm check --type=merge -p '{"spec":{"replicas":3}}' | grep "no change" >/dev/null \
    || die "an unchanged patch should report (no change)"
  kc -n kc-check annotate omm check openmed.ai/rollback-to=OpenMed/x-v0
  kc -n kc-check wait --for=jsonpath='{.spec.replicas}'=3 --timeout=10s omm/check
  kc -n kc-check describe omm check | grep "Replicas:  *3" >/dev/null || die "describe does not show the spec"
  local err
  err=$(kc -n kc-check patch omm check --type=merge -p '{"spec":{"tier":"Huge"}}' 2>&1 || true)
  [[ $err == *spec.tier*Unsupported* ]] || die "bad tier not rejected with its field path: $err"
  err=$(kc -n kc-check apply -f - 2>&1 <<'YAML' || true
apiVersion: openmed.ai/v1alpha1
kind: OpenMedModel
metadata:
  name: typo
spec:
  family: PII
  version: OpenMed/x-v1
  tier: Small
  replicas: 1
  replica: 2
  rolloutStrategy:
    type: Recreate
YAML
)
  [[ $err == *'unknown field "spec.replica"'* ]] || die "unknown field not rejected with its path: $err"
  err=$(kc -n kc-check patch omm check -p '{"spec":{"replicas":2}}' 2>&1 || true)
  [[ $err == *"not supported"* || $err == *UnsupportedMediaType* || $err == *"unknown format"* ]] \
    || die "strategic merge patch on a custom resource should be refused (415): $err"
  kc -n kc-check apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
YAML
  kc -n kc-check rollout status deploy/web --timeout=30s
  kc -n kc-check set image deploy/web web=nginx:1.28 >/dev/null
  kc -n kc-check rollout status deploy/web --timeout=30s
  # The ReplicaSets and pods behind it, as a newcomer looks at them.
  [[ $(kc -n kc-check get pods -l app=web --no-headers | grep -c ' Running ') == 2 ]] \
    || die "two running pods expected: $(kc -n kc-check get pods 2>&1)"
  [[ $(kc -n kc-check get rs --no-headers | wc -l) == 2 ]] || die "two ReplicaSets expected"
  kc -n kc-check rollout history deploy/web | grep -E '^2 ' >/dev/null || die "rollout history lacks revision 2"
  kc -n kc-check describe deploy web | grep -E '^NewReplicaSet: +web-' >/dev/null \
    || die "describe deployment names no new ReplicaSet"
  local pod
  pod=$(kc -n kc-check get pods -l app=web -o name | sed -n 1p)
  kc -n kc-check describe "$pod" | grep -E '^Controlled By: +ReplicaSet/web-' >/dev/null \
    || die "describe pod names no ReplicaSet"
  kc explain omm.spec.rolloutStrategy | grep -E '^  progressDeadlineSeconds' >/dev/null \
    || die "kubectl explain does not see the CRD's schema"
  generator_checks "$mode"
  kc -n kc-check delete omm check --timeout=20s
  local left
  left=$(kc -n kc-check get omm -o name) || die "listing OpenMedModels after delete failed: $left"
  [[ -z $left ]] || die "delete did not remove the resource: $left"
  kc delete -f "$REPO/manifests/base/crd.json" --timeout=20s
}

# The install: `kubectl apply -k manifests/` and the namespaced overlay, then
# `kubectl delete -k`, which removes every object it names, the namespace
# last (it terminates, then goes): no NotFound on the way.
manifests_checks() {
  say "The manifests: kubectl apply -k manifests/ and the namespaced overlay"
  kc apply -k "$REPO/manifests/"
  for obj in namespace/openmed-system crd/openmedmodels.openmed.ai clusterrole/openmed-operator \
    clusterrolebinding/openmed-operator; do
    kc get "$obj" >/dev/null || die "$obj missing after apply -k"
  done
  kc -n openmed-system get serviceaccount/openmed-operator deployment/openmed-operator >/dev/null
  kc apply -f "$REPO/manifests/sample-deployment.yaml"
  kc apply -k "$REPO/manifests/overlays/namespaced/"
  kc -n openmed get role/openmed-operator rolebinding/openmed-operator >/dev/null
  args=$(kc -n openmed-system get deploy openmed-operator -o 'jsonpath={.spec.template.spec.containers[0].args}')
  [[ $args == *--namespace=openmed* ]] || die "the overlay did not set --namespace: $args"
  kc delete -k "$REPO/manifests/" >/dev/null || die "kubectl delete -k manifests/ failed"
  local err
  err=$(kc get namespace openmed-system 2>&1) && die "namespace openmed-system still there after delete -k"
  [[ $err == *NotFound* ]] || die "reading namespace openmed-system: $err"
  kc delete namespace openmed --ignore-not-found >/dev/null
}

# The operator through the shared scenario, as its ServiceAccount under the
# shipped RBAC, then /metrics scraped with curl as Prometheus would. SERVER,
# CA and SA_TOKEN say how the operator reaches the cluster.
scenario_checks() {
  say "The operator, through the shared scenario, as its ServiceAccount under the shipped RBAC"
  kc apply -k "$REPO/manifests/"
  kc wait --for condition=established --timeout=20s crd/openmedmodels.openmed.ai
  kc apply -f "$REPO/manifests/sample-deployment.yaml"
  printf '%s' "$SA_TOKEN" >"$WORK/sa-token"
  start_operator "$WORK/operator.log" --server "$SERVER" --health-addr 127.0.0.1:0 --namespace openmed \
    --ca-file "$CA" --token-file "$WORK/sa-token" \
    --leader-elect --lease-namespace openmed-system --metrics-addr 127.0.0.1:0 --ui-addr 127.0.0.1:0
  NS=openmed
  TIMEOUT=60
  scenario_all

  say "Secure /metrics, scraped with curl as Prometheus would be"
  prom_token=$(prometheus_token)
  metrics_url=$(metrics_url "$WORK/operator.log")
  [[ -n $metrics_url ]] || die "no https metrics address in the operator log"
  scrape() { curl -sk -o "$WORK/scrape.out" -w '%{http_code}' "$@" "$metrics_url/metrics" || true; }
  [[ $(scrape) == 401 ]] || die "/metrics without a token should be 401"
  [[ $(scrape -H "Authorization: Bearer $SA_TOKEN") == 403 ]] ||
    die "/metrics for a token without the metrics-reader role should be 403"
  [[ $(scrape -H "Authorization: Bearer $prom_token") == 200 ]] || die "/metrics refused Prometheus's token"
  grep -q '^openmed_operator_leader 1' "$WORK/scrape.out" || die "no leader gauge in the scrape"
  stop_operator
  grep -q "shutting down" "$WORK/operator.log" || die "no shutdown line in the operator log"
  grep -q "became the leader" "$WORK/operator.log" || die "the operator never took the lease"
}

# operator_refusals: how many of the operator's requests were refused 403,
# from python's stdin: kubesim's request log, or the real API server's audit
# log. A log that holds none of the operator's requests fails: 0 refused of
# nothing would prove nothing.
operator_refusals() {
  python3 -c '
import json, sys
text = sys.stdin.read()
try:
    log = json.loads(text)
    log = log.get("requests", log) if isinstance(log, dict) else log
    codes = [(r.get("userAgent", ""), r.get("status")) for r in log]
except ValueError:
    events = [json.loads(l) for l in text.splitlines() if l.strip()]
    codes = [(e.get("userAgent", ""), e.get("responseStatus", {}).get("code")) for e in events]
ours = [code for ua, code in codes if ua.startswith("openmed-operator/")]
if not ours:
    sys.exit("the log holds no request of the operator")
print(sum(1 for code in ours if code == 403))'
}

if [[ $CLUSTER == real ]]; then
  export OMO_CP_DIR="$REPO/target/control-plane-e2e"
  # shellcheck source=scripts/control-plane-lib.sh
  source "$REPO/scripts/control-plane-lib.sh"
  # cp_down first: stop_all waits for every child, and the plane's are children here.
  trap 'cp_down; stop_all; rm -rf "$WORK"' EXIT
  cp_up --warmup-ms 300
  export KUBECONFIG="$OMO_CP_DIR/admin.kubeconfig" KC_CACHE="$WORK/kube-cache"
  export TOKEN_KUBECONFIG="$OMO_CP_DIR/anonymous.kubeconfig"
  KUBECTL="$(cp_bin_dir kubernetes)/kubectl"
  export KUBECTL
  kubectl_checks real
  manifests_checks
  SERVER=$(sed -n 's/^OMO_CP_SERVER=//p' "$OMO_CP_DIR/env") CA="$OMO_CP_DIR/pki/ca.crt"
  kc apply -k "$REPO/manifests/" >/dev/null
  SA_TOKEN=$(kc -n openmed-system create token openmed-operator)
  scenario_checks
  refused=$(operator_refusals <"$OMO_CP_DIR/audit.log")
  [[ $refused == 0 ]] || die "the operator was refused $refused requests under the shipped RBAC"
  say "e2e-sim on the real control plane: all passed"
  exit 0
fi

say "kubesim, plain HTTP"
start_sim "$WORK/plain" --warmup-ms 300
kubectl_checks plain

say "kubesim, TLS and a bearer token"
start_sim "$WORK/tls" --tls --token "s3cr3t-$$" --warmup-ms 300
kubectl_checks "tls+token"
err=$(kc --token wrong get ns 2>&1 || true)
[[ $err == *Unauthorized* ]] || die "a wrong token should be refused: $err"

start_sim "$WORK/manifests"
manifests_checks

SA_TOKEN="sa-$$-$RANDOM"
# TLS: kubectl sends bearer tokens over https only.
start_sim "$WORK/scenario" --warmup-ms 300 --tls --token "admin-$$" \
  --sa-token "openmed-system/openmed-operator=$SA_TOKEN"
SERVER=$SIM_URL CA="$WORK/scenario/ca.crt"
scenario_checks
refused=$(curl -fsS --cacert "$WORK/scenario/ca.crt" -H "Authorization: Bearer admin-$$" "$SIM_URL/__sim/requests" |
  operator_refusals)
[[ $refused == 0 ]] || die "the operator was refused $refused requests under the shipped RBAC"
say "The demo can be run twice: a second run stops the kept one; --stop ends it"
"$REPO/scripts/demo.sh" --keep >"$WORK/demo1.log" 2>&1 || die "demo --keep failed: $(tail -5 "$WORK/demo1.log")"
read -r -a first <"$REPO/target/demo.pids"
"$REPO/scripts/demo.sh" --keep >"$WORK/demo2.log" 2>&1 || die "a second demo --keep failed: $(tail -5 "$WORK/demo2.log")"
grep -q "stopping the kept demo (PIDs" "$WORK/demo2.log" || die "the second demo did not stop the first"
for pid in "${first[@]}"; do
  kill -0 "$pid" 2>/dev/null && die "the first demo's process $pid still runs"
done
KUBECONFIG="$REPO/target/demo/cluster/kubeconfig" kc get omm -A >/dev/null || die "the second demo's cluster does not answer"
read -r -a second <"$REPO/target/demo.pids"
"$REPO/scripts/demo.sh" --stop >/dev/null || die "demo --stop failed"
for pid in "${second[@]}"; do
  kill -0 "$pid" 2>/dev/null && die "demo --stop left process $pid running"
done
[[ ! -e $REPO/target/demo.pids ]] || die "demo --stop left its PID file"
say "e2e-sim: all passed"

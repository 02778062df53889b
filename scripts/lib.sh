#!/usr/bin/env bash
# Helpers shared by the scripts: logging, waiting, and a simulated cluster.
# Source it; do not run it.

# shellcheck disable=SC2034
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
info() { printf '    %s\n' "$*"; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND until it succeeds.
wait_for() {
  local secs=$1 what=$2
  shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= end)); then
      die "timed out after ${secs}s waiting for: $what"
    fi
    sleep 0.3
  done
}

# kubectl with a private discovery cache (discovery is cached for hours).
export KC_CACHE="${KC_CACHE:-${TMPDIR:-/tmp}/kc-cache-$$}"
# KUBECTL names another kubectl (the real control plane's own release).
kc() { "${KUBECTL:-kubectl}" --cache-dir "$KC_CACHE" "$@"; }

# start_sim DIR [kubesim flags...]: start the simulated API server, export
# KUBECONFIG and SIM_URL; the process is stopped by stop_all.
SIM_PIDS=()
start_sim() {
  local dir=$1
  shift
  local bin="$REPO/target/debug/kubesim"
  [[ -x $bin ]] || (cd "$REPO" && cargo build -q -p kubesim) || die "cannot build kubesim"
  mkdir -p "$dir"
  rm -f "$dir/url"
  "$bin" --dir "$dir" "$@" >"$dir/kubesim.log" 2>&1 &
  SIM_PIDS+=($!)
  wait_for 20 "kubesim to listen" test -s "$dir/url"
  export KUBECONFIG="$dir/kubeconfig"
  SIM_URL="$(cat "$dir/url")"
  export SIM_URL
  export KC_CACHE="$dir/kube-cache"
}

# prometheus_token: what docs/security.md has a user do for Prometheus (the
# ServiceAccount monitoring/prometheus-k8s bound to the metrics-reader role,
# with kubectl's own generators), then print a token for it.
prometheus_token() {
  kc create namespace monitoring >/dev/null
  kc -n monitoring create serviceaccount prometheus-k8s >/dev/null
  kc create clusterrolebinding prometheus-openmed-metrics \
    --clusterrole=openmed-operator-metrics-reader --serviceaccount=monitoring:prometheus-k8s >/dev/null
  kc create token prometheus-k8s -n monitoring
}

# metrics_url LOGFILE: the https origin of /metrics from the operator's log.
metrics_url() {
  grep -o 'metrics on https://[0-9.:]*' "$1" | sed -n '1s/metrics on //p'
}

# source_info: export REVISION and SOURCE_DATE_EPOCH (the commit and its
# time) from this tree's git, or, in an unpacked vendored bundle (no git of
# its own: a git found above it is another project's), from the record
# scripts/vendor.sh put in it.
source_info() {
  if [[ $(git -C "$REPO" rev-parse --show-toplevel 2>/dev/null) == "$REPO" ]]; then
    REVISION=$(git -C "$REPO" rev-parse HEAD)
    SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct)
  elif [[ -f $REPO/target/vendor-bundle/source.env ]]; then
    # shellcheck source=/dev/null
    source "$REPO/target/vendor-bundle/source.env"
  else
    die "no git here and no target/vendor-bundle/source.env: which commit is this?"
  fi
  export REVISION SOURCE_DATE_EPOCH
}

# start_operator LOGFILE [flags...]: run the operator binary in the background.
OP_PID=""
start_operator() {
  local log=$1
  shift
  local bin="${OPERATOR_BIN:-$REPO/target/debug/openmed-operator}"
  [[ -x $bin ]] || (cd "$REPO" && cargo build -q --bin openmed-operator) || die "cannot build the operator"
  "$bin" "$@" >"$log" 2>&1 &
  OP_PID=$!
}

# stop_operator: SIGTERM, and insist on a clean exit within 10 s.
stop_operator() {
  [[ -n $OP_PID ]] || return 0
  kill -TERM "$OP_PID"
  local end=$((SECONDS + 10))
  while kill -0 "$OP_PID" 2>/dev/null; do
    ((SECONDS < end)) || die "the operator did not exit within 10 s of SIGTERM"
    sleep 0.1
  done
  wait "$OP_PID" || die "the operator exited non-zero after SIGTERM"
  OP_PID=""
}

stop_all() {
  [[ -n $OP_PID ]] && kill "$OP_PID" 2>/dev/null
  for p in "${SIM_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  return 0
}

# kubernetes_validate_env: the Python environment holding kubernetes-validate
# (from PyPI, pinned), installed into target/pyenv on first use; its path.
kubernetes_validate_env() {
  local venv="$REPO/target/pyenv" version=1.37.0
  if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1; then
    say "Installing kubernetes-validate $version into $venv" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q "kubernetes-validate==$version" >&2
  fi
  echo "$venv"
}

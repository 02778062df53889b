#!/usr/bin/env bash
# The real control plane's functions, shared by scripts/control-plane.sh and
# the scripts that run on it. Source it after lib.sh; do not run it.
# docs/development.md ("The real control plane") says what each step does and why.

CP_MODULES="$REPO/tests/control-plane"
CP_CACHE="${OMO_CP_CACHE:-$HOME/.cache/openmed-operator/control-plane}"
CP_DIR="${OMO_CP_DIR:-$REPO/target/control-plane}"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

# cp_go_env: a Go that is there, or a clear error (the machines have it at /usr/local/go).
cp_go_env() {
  if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  command -v go >/dev/null || die "Go is needed to build the control plane (expected at /usr/local/go)"
}

# cp_key SET: the cache key of a tool set: its go.mod and go.sum, the Go
# version and the flags, so that any change rebuilds.
cp_key() {
  local set=$1
  {
    cat "$CP_MODULES/$(cp_module_of "$set")/go.mod" "$CP_MODULES/$(cp_module_of "$set")/go.sum"
    [[ $set != standin ]] || cat "$CP_MODULES"/kubernetes/kubelet-standin/*.go
    go version
    declare -f "$(cp_builder "$set")"
  } | sha256sum | cut -c1-16
}

# cp_module_of SET: the Go module SET is built from; the kubelet stand-in is
# our own package in the Kubernetes module, so that it uses the release's own
# client-go and shares its build cache, but keeps a key of its own.
cp_module_of() {
  case $1 in
    standin) echo kubernetes ;;
    *) echo "$1" ;;
  esac
}

# cp_bin_dir SET: where SET's binaries are cached.
cp_bin_dir() { echo "$CP_CACHE/$1-$(cp_key "$1")"; }

# cp_module_version SET MODULE: the version SET's go.mod pins MODULE at.
cp_module_version() {
  (cd "$CP_MODULES/$1" && go list -m -f '{{.Version}}' "$2")
}

# cp_build_set SET OUT PACKAGE...: build each main package into OUT, one at a
# time so that each binary's time is printed; upstream's flags: static,
# -trimpath, and the release's tags; the version stamped as upstream's
# hack/lib/version.sh does, so that /version and the emulation version agree.
cp_build_set() {
  local set=$1 out=$2 pkg name t ldflags=""
  shift 2
  if [[ $set == kubernetes ]]; then
    local v major minor
    v=$(cp_module_version kubernetes k8s.io/kubernetes)
    major=${v#v}
    major=${major%%.*}
    minor=${v#v*.}
    minor=${minor%%.*}
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
      ldflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
    done
  fi
  mkdir -p "$out.partial"
  for pkg in "$@"; do
    t=$SECONDS
    name=${pkg##*/}
    [[ ! $name =~ ^v[0-9]+$ ]] || name=$set
    (cd "$CP_MODULES/$(cp_module_of "$set")" && go build -trimpath -tags selinux,notest -ldflags "-s -w$ldflags" \
      -o "$out.partial/$name" "$pkg") || return 1
    info "$(printf '%-26s %4d s' "$name" $((SECONDS - t)))"
  done
  rm -rf "$out"
  mv "$out.partial" "$out"
}

# cp_builder SET: the function that builds SET (its text is in SET's key).
cp_builder() {
  case $1 in
    helm | promtool) echo cp_build_tool ;;
    *) echo cp_build_set ;;
  esac
}

# cp_build_tool SET OUT PACKAGE: build one of the suite's own tools (helm,
# promtool) into OUT: static, -trimpath, the version stamped as upstream's
# Makefiles stamp it, so that `helm version` and `promtool --version` name
# the pinned release; promtool without the service-discovery plugins
# (remove_all_sd), which it never uses to check rules or metrics.
cp_build_tool() {
  local set=$1 out=$2 pkg=$3 t=$SECONDS v tags="" ldflags=""
  case $set in
    helm)
      v=$(cp_module_version helm helm.sh/helm/v4)
      ldflags="-X helm.sh/helm/v4/internal/version.version=$v"
      ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
      ;;
    promtool)
      # Prometheus 3.x is tagged v0.3MM.P as a Go module: v0.316.0 is 3.16.0.
      v=$(cp_module_version promtool github.com/prometheus/prometheus)
      v=3.${v#v0.3}
      ldflags="-X github.com/prometheus/common/version.Version=$v"
      ldflags+=" -X github.com/prometheus/common/version.Branch=release"
      tags=remove_all_sd
      ;;
    *) die "cp_build_tool: no tool set $set" ;;
  esac
  mkdir -p "$out.partial"
  (cd "$CP_MODULES/$set" && go build -trimpath ${tags:+-tags "$tags"} -ldflags "-s -w $ldflags" \
    -o "$out.partial/$set" "$pkg") || return 1
  info "$(printf '%-26s %4d s' "$set" $((SECONDS - t)))"
  rm -rf "$out"
  mv "$out.partial" "$out"
}

# cp_build: build every tool set the suite needs, each cached by its key; a
# warm cache returns at once.
cp_build() {
  cp_go_env
  local set out start=$SECONDS
  say "The real control plane's binaries ($(go version | cut -d' ' -f3), cache $CP_CACHE)"
  for set in kubernetes etcd standin helm promtool; do
    out=$(cp_bin_dir "$set")
    cp_prune "$set"
    if [[ -x $out/$(cp_first_binary "$set") ]]; then
      info "$set: cached ($out)"
      continue
    fi
    info "$set: building into $out"
    # shellcheck disable=SC2046
    "$(cp_builder "$set")" "$set" "$out" $(cp_packages "$set") || die "building the $set tool set failed"
  done
  info "kube-apiserver, kube-controller-manager, kubectl: $(cp_module_version kubernetes k8s.io/kubernetes)"
  info "etcd: $(cp_module_version etcd go.etcd.io/etcd/server/v3)"
  info "kubelet-standin: ours, with client-go $(cp_module_version kubernetes k8s.io/client-go)"
  info "helm: $(cp_module_version helm helm.sh/helm/v4); promtool: prometheus $(cp_module_version promtool github.com/prometheus/prometheus)"
  info "($((SECONDS - start)) s in all)"
}

# cp_packages SET: the main packages SET's go.mod lists as tools.
cp_packages() {
  if [[ $1 == standin ]]; then
    echo ./kubelet-standin
    return
  fi
  (cd "$CP_MODULES/$1" && go mod edit -json) |
    python3 -c 'import json, sys; print(" ".join(t["Path"] for t in json.load(sys.stdin)["Tool"]))'
}

# cp_first_binary SET: a binary whose presence says SET was built whole.
cp_first_binary() {
  case $1 in
    kubernetes) echo kubectl ;;
    etcd) echo etcd ;;
    standin) echo kubelet-standin ;;
    *) echo "$1" ;;
  esac
}

# cp_free_port: a port on 127.0.0.1 nobody listens on now.
cp_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cp_pki DIR: a CA, the API server's serving certificate for loopback, client
# certificates for the admin (system:masters), the controller-manager and the
# kubelet stand-in, and the ServiceAccount signing key: envtest's set, made
# fresh at each `up`.
cp_pki() {
  local d=$1
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 \
      -subj "/CN=openmed-operator-test-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
      "extendedKeyUsage=serverAuth" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    cp_client_cert admin openmed-admin system:masters
    cp_client_cert controller-manager system:kube-controller-manager ""
    cp_client_cert standin kubelet-standin system:masters
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  ) || die "making the control plane's certificates failed"
}

# cp_client_cert NAME CN ORG: a client certificate signed by the CA, in the current folder.
cp_client_cert() {
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2${3:+/O=$3}" 2>/dev/null
  echo "extendedKeyUsage=clientAuth" >client.ext
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext \
    -out "$1.crt" 2>/dev/null
}

# cp_kubeconfig NAME SERVER: a kubeconfig for NAME's client certificate
# (anonymous: none, for a caller that brings its own --token).
cp_kubeconfig() {
  local name=$1 server=$2
  cat >"$CP_DIR/$name.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: openmed-real
  cluster:
    server: $server
    certificate-authority: $CP_DIR/pki/ca.crt
users:
- name: $name
  user:
$(if [[ $name != anonymous ]]; then
    printf '    client-certificate: %s\n    client-key: %s\n' "$CP_DIR/pki/$name.crt" "$CP_DIR/pki/$name.key"
  else
    echo '    {}'
  fi)
contexts:
- name: openmed-real
  context: {cluster: openmed-real, user: $name}
current-context: openmed-real
KUBECONFIG
}

# cp_audit_policy: every request a ServiceAccount outside kube-system makes
# (the operator's, the tests'), at Metadata: verb, resource, user, code.
cp_audit_policy() {
  cat >"$CP_DIR/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
POLICY
}

CP_COMPONENTS=(etcd apiserver controller-manager kubelet)

# cp_args COMPONENT: the command line `up` chose for COMPONENT, one word a line.
cp_write_args() {
  local c=$1
  shift
  printf '%s\n' "$@" >"$CP_DIR/$c.args"
}

# cp_start COMPONENT: start one component from its recorded command line, in a
# session of its own, its output appended to its log.
cp_start() {
  local c=$1 args=()
  [[ -s $CP_DIR/$c.args ]] || die "no control plane is up in $CP_DIR (no $c.args): run 'up' first"
  if cp_running "$c"; then
    info "$c is already running (pid $(cat "$CP_DIR/$c.pid"))"
    return 0
  fi
  mapfile -t args <"$CP_DIR/$c.args"
  setsid "${args[@]}" >>"$CP_DIR/$c.log" 2>&1 </dev/null &
  echo $! >"$CP_DIR/$c.pid"
}

# cp_running COMPONENT: whether the process `up` or `start` recorded still runs
# and is still ours (its command line is the recorded one).
cp_running() {
  local pid
  pid=$(cat "$CP_DIR/$1.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(head -c 4096 "/proc/$pid/cmdline" 2>/dev/null | tr '\0' '\n' | head -1) == $(head -1 "$CP_DIR/$1.args") ]]
}

# cp_alive COMPONENT: the process recorded for it is there and no zombie,
# whatever its command line reads: what a wait checks of the processes `up`
# has just started (cp_running's command-line check, for a pid recorded
# earlier, once read wrong for a running etcd).
cp_alive() {
  local pid state
  pid=$(cat "$CP_DIR/$1.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state && $state != Z ]]
}

# cp_stop COMPONENT: stop one component, its state kept; SIGKILL after 10 s.
cp_stop() {
  local c=$1 pid end
  cp_running "$c" || { rm -f "$CP_DIR/$c.pid"; return 0; }
  pid=$(cat "$CP_DIR/$c.pid")
  kill -TERM "$pid" 2>/dev/null || true
  end=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$CP_DIR/$c.pid"
}

# cp_logs: the tails of every component's log, for a stage that failed.
cp_logs() {
  local c
  for c in "${CP_COMPONENTS[@]}"; do
    [[ -f $CP_DIR/$c.log ]] || continue
    say "The last lines of $c's log ($CP_DIR/$c.log)"
    tail -n 25 "$CP_DIR/$c.log" | cut -c1-400
  done
}

# cp_down: stop every component `up` started and remove the plane's files.
cp_down() {
  local c
  [[ -d $CP_DIR ]] || return 0
  for c in kubelet controller-manager apiserver etcd; do cp_stop "$c"; done
  rm -rf "$CP_DIR"
}

# cp_env: what the tests read, as shell assignments.
cp_env() {
  [[ -s $CP_DIR/env ]] || die "no control plane is up in $CP_DIR: run 'scripts/control-plane.sh up'"
  sed "s/^/export /" "$CP_DIR/env"
}

# cp_readyz URL: whether the API server answers ok on /readyz (as the admin).
cp_readyz() {
  [[ $(curl -s --max-time 5 --cacert "$CP_DIR/pki/ca.crt" --cert "$CP_DIR/pki/admin.crt" \
    --key "$CP_DIR/pki/admin.key" "$1/readyz") == ok ]]
}

# cp_up [--unloadable REGEX] [--warmup-ms N]: build (cached), then start etcd,
# kube-apiserver (with the owner-references admission many distributions
# enable, so that the operator's blockOwnerDeletion needs its finalizers
# rule, as kubesim enforces), kube-controller-manager and the kubelet
# stand-in on loopback; wait until the API server is ready, the controllers work and the
# node is registered; print the kubeconfig and the time it took.
cp_up() {
  local unloadable=unloadable warmup_ms=1000 start=$SECONDS
  while (($#)); do
    case $1 in
      --unloadable) unloadable=${2:?--unloadable needs a value}; shift 2 ;;
      --warmup-ms) warmup_ms=${2:?--warmup-ms needs a value}; shift 2 ;;
      *) die "up: unknown flag $1 (flags: --unloadable REGEX, --warmup-ms N)" ;;
    esac
  done
  cp_build >/dev/null
  local k8s etcd standin
  k8s=$(cp_bin_dir kubernetes)
  etcd=$(cp_bin_dir etcd)
  standin=$(cp_bin_dir standin)
  cp_down
  mkdir -p "$CP_DIR"
  say "Starting the real control plane in $CP_DIR"
  cp_pki "$CP_DIR/pki"
  cp_audit_policy
  local ep pp ap server
  ep=$(cp_free_port)
  pp=$(cp_free_port)
  ap=$(cp_free_port)
  server="https://127.0.0.1:$ap"
  cp_kubeconfig admin "$server"
  cp_kubeconfig controller-manager "$server"
  cp_kubeconfig standin "$server"
  cp_kubeconfig anonymous "$server"
  cp_write_args etcd "$etcd/etcd" --name=openmed-test --data-dir="$CP_DIR/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ep" --advertise-client-urls="http://127.0.0.1:$ep" \
    --listen-peer-urls="http://127.0.0.1:$pp" --initial-advertise-peer-urls="http://127.0.0.1:$pp" \
    --initial-cluster="openmed-test=http://127.0.0.1:$pp" --unsafe-no-fsync --log-level=warn
  # shellcheck disable=SC2086
  cp_write_args apiserver "$k8s/kube-apiserver" --etcd-servers="http://127.0.0.1:$ep" \
    --cert-dir="$CP_DIR/pki" --tls-cert-file="$CP_DIR/pki/apiserver.crt" \
    --tls-private-key-file="$CP_DIR/pki/apiserver.key" --client-ca-file="$CP_DIR/pki/ca.crt" \
    --secure-port="$ap" --bind-address=127.0.0.1 --service-cluster-ip-range=10.0.0.0/24 \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$CP_DIR/pki/sa.pub" --service-account-signing-key-file="$CP_DIR/pki/sa.key" \
    --authorization-mode=Node,RBAC --allow-privileged=true --profiling=false \
    --enable-admission-plugins=OwnerReferencesPermissionEnforcement \
    --audit-policy-file="$CP_DIR/audit-policy.yaml" --audit-log-path="$CP_DIR/audit.log" \
    --audit-log-format=json ${OMO_CP_APISERVER_FLAGS:-}
  local qps=${OMO_CP_KCM_QPS:-20}
  cp_write_args controller-manager "$k8s/kube-controller-manager" \
    --kubeconfig="$CP_DIR/controller-manager.kubeconfig" \
    --controllers=deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller,resourcequota-controller \
    --use-service-account-credentials=true --service-account-private-key-file="$CP_DIR/pki/sa.key" \
    --root-ca-file="$CP_DIR/pki/ca.crt" --leader-elect=false --secure-port=0 \
    --kube-api-qps="$qps" --kube-api-burst=$((qps * 3 / 2)) \
    --concurrent-deployment-syncs=$((qps < 100 ? 5 : 50)) --concurrent-replicaset-syncs=$((qps < 100 ? 5 : 50))
  cp_write_args kubelet "$standin/kubelet-standin" --kubeconfig="$CP_DIR/standin.kubeconfig" \
    --unloadable="$unloadable" --warmup="${warmup_ms}ms"
  {
    echo "OMO_CONTROL_PLANE=$CP_DIR"
    echo "KUBECONFIG=$CP_DIR/admin.kubeconfig"
    echo "OMO_CP_SERVER=$server"
    echo "OMO_CP_CA=$CP_DIR/pki/ca.crt"
    echo "OMO_CP_KUBECTL=$k8s/kubectl"
    echo "OMO_CP_HELM=$(cp_bin_dir helm)/helm"
    echo "OMO_CP_PROMTOOL=$(cp_bin_dir promtool)/promtool"
    echo "OMO_CP_AUDIT=$CP_DIR/audit.log"
    echo "OMO_CP_VERSION=$(cp_module_version kubernetes k8s.io/kubernetes)"
    echo "OMO_CP_WARMUP_MS=$warmup_ms"
  } >"$CP_DIR/env"
  cp_start etcd
  cp_start apiserver
  cp_wait 90 "kube-apiserver's /readyz" cp_readyz "$server"
  cp_start controller-manager
  cp_start kubelet
  local kc=("$k8s/kubectl" --kubeconfig "$CP_DIR/admin.kubeconfig")
  cp_wait 60 "the controllers (the default ServiceAccount)" "${kc[@]}" get serviceaccount default
  cp_wait 30 "the kubelet stand-in's Node" "${kc[@]}" get node standin
  info "$("${kc[@]}" version 2>/dev/null | tr '\n' ' ')"
  info "up in $((SECONDS - start)) s; export KUBECONFIG=$CP_DIR/admin.kubeconfig (or: source <(scripts/control-plane.sh env))"
}

# cp_wait SECONDS WHAT COMMAND...: wait_for, but a failure prints the tails of
# the components' logs and keeps them.
cp_wait() {
  local secs=$1 what=$2 end
  shift 2
  end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= end)); then
      cp_logs >&2
      die "timed out after ${secs}s waiting for $what (logs kept in $CP_DIR)"
    fi
    local c
    for c in "${CP_COMPONENTS[@]}"; do
      if [[ -s $CP_DIR/$c.args && ! -s $CP_DIR/$c.pid ]]; then continue; fi
      [[ ! -s $CP_DIR/$c.pid ]] || cp_alive "$c" || {
        cp_logs >&2
        die "$c exited while waiting for $what (logs kept in $CP_DIR)"
      }
    done
    sleep 0.3
  done
}

# cp_lint: gofmt and go vet over our own Go code in the tools modules.
cp_lint() {
  cp_go_env
  local unformatted
  unformatted=$(gofmt -l "$CP_MODULES")
  [[ -z $unformatted ]] || die "gofmt would change: $unformatted"
  (cd "$CP_MODULES/kubernetes" && go vet ./kubelet-standin) || die "go vet failed"
  info "gofmt and go vet: clean"
}

# cp_prune SET: remove SET's binaries built for keys other than the current one.
cp_prune() {
  local keep d
  keep=$(cp_bin_dir "$1")
  for d in "$CP_CACHE/$1"-*; do
    [[ -d $d && $d != "$keep" && $d != "$keep.partial" ]] || continue
    rm -rf "$d"
  done
}

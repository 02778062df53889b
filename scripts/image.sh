#!/usr/bin/env bash
# The operator's OCI image, made with no container engine and no network:
# scripts/oci_image.py writes it from the static binary, its
# SBOM, the licence and scripts/rootfs/etc (passwd and group for 65532), as
# an OCI layout and an oci-archive. Reproducible: the same commit gives the
# same digest.
#
# Usage: scripts/image.sh [--out DIR] [--bin BINARY] [--check]
#   --out DIR     where to write (default target/image): DIR/layout (OCI
#                 layout, tag = the crate's version) and
#                 DIR/openmed-operator-<version>.oci.tar (oci-archive)
#   --bin BINARY  the static binary (default: scripts/build-static.sh's);
#                 its SBOM is read from beside its target directory
#   --check       prove it with real tools: skopeo inspect reads both forms;
#                 umoci unpack makes a runtime bundle; crun runs it (read-only
#                 root, no capabilities, UID 65532, the host's network
#                 namespace) against kubesim on 127.0.0.1 and the example
#                 OpenMedModel reaches Ready.
# Needs: python3; with --check also skopeo, umoci, crun (apt-get install
# skopeo umoci crun), kubectl, and root or user namespaces.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

OUT="$REPO/target/image"
BIN="$REPO/target/static/x86_64-unknown-linux-musl/release/openmed-operator"
CHECK=0
while (($#)); do
  case $1 in
    --out) OUT="$(realpath -m "$2")" && shift ;;
    --bin) BIN="$(realpath -m "$2")" && shift ;;
    --check) CHECK=1 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
  esac
  shift
done
SBOM="$(dirname "$(dirname "$(dirname "$BIN")")")/openmed-operator.cdx.json"
[[ -x $BIN && -s $SBOM ]] || die "no binary and SBOM at $BIN: run scripts/build-static.sh first"

source_info
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
export VERSION
LAYOUT="$OUT/layout"
ARCHIVE="$OUT/openmed-operator-$VERSION.oci.tar"
mkdir -p "$OUT"
say "Assembling the image (no engine, no network)"
python3 scripts/oci_image.py "$BIN" "$SBOM" "$LAYOUT" "$ARCHIVE" | sed 's/^/    /'
info "$ARCHIVE: $(stat -c %s "$ARCHIVE") bytes"

((CHECK)) || exit 0

say "skopeo reads the layout and the archive"
inspect() { skopeo inspect --format '{{.Digest}} {{.Architecture}} {{index .Labels "org.opencontainers.image.revision"}}' "$1"; }
a=$(inspect "oci:$LAYOUT:$VERSION")
b=$(inspect "oci-archive:$ARCHIVE:$VERSION")
info "layout:  $a"
info "archive: $b"
[[ $a == "$b" && $a == *" amd64 $REVISION" ]] || die "skopeo saw different images or wrong labels"
user=$(skopeo inspect --config "oci:$LAYOUT:$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["User"])')
[[ $user == 65532:65532 ]] || die "the image runs as $user"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/omo-image.XXXXXX")"
ID="omo-image-check-$$"
cleanup() {
  crun kill "$ID" KILL >/dev/null 2>&1 || true
  crun delete -f "$ID" >/dev/null 2>&1 || true
  stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

say "umoci unpacks a runtime bundle"
ROOTLESS=()
((EUID == 0)) || ROOTLESS=(--rootless)
umoci unpack "${ROOTLESS[@]}" --image "$LAYOUT:$VERSION" "$WORK/bundle" >/dev/null
for f in openmed-operator etc/passwd usr/share/doc/openmed-operator/sbom.cdx.json usr/share/doc/openmed-operator/LICENSE; do
  [[ -e $WORK/bundle/rootfs/$f ]] || die "/$f missing from the unpacked image"
done
files=$(cd "$WORK/bundle/rootfs" && find . -type f | sed 's#^\.##' | sort)
info "rootfs: $(tr '\n' ' ' <<<"$files")"
# The Containerfile (for engine users) must give the same files: its final
# stage's COPY destinations.
engine=$(awk '/^FROM scratch/ { s = 1 } s && /^COPY/ {
    n = 0; for (i = 2; i < NF; i++) if ($i !~ /^--/) src[++n] = $i
    for (i = 1; i <= n; i++) { d = $NF; if (d ~ /\/$/) { k = split(src[i], p, "/"); d = d p[k] }; print d }
  }' Containerfile | sort)
[[ $files == "$engine" ]] || die "the Containerfile's layout differs: $(tr '\n' ' ' <<<"$engine")"

say "crun runs it against kubesim: read-only root, no capabilities, UID 65532, host network"
start_sim "$WORK/sim" --warmup-ms 300
kc apply -f "$REPO/manifests/base/crd.json" >/dev/null
kc wait --for condition=established --timeout=20s crd/openmedmodels.openmed.ai >/dev/null
kc apply -f "$REPO/manifests/sample-deployment.yaml" >/dev/null
python3 - "$WORK/bundle/config.json" "$SIM_URL" <<'PY'
import json, sys
path, url = sys.argv[1:3]
c = json.load(open(path))
p = c["process"]
assert p["user"]["uid"] == 65532 and p["user"]["gid"] == 65532, p["user"]
p["args"] += ["--server", url, "--namespace", "openmed",
              "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
              "--ui-addr", "127.0.0.1:0"]
p["terminal"] = False
p["noNewPrivileges"] = True
p["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
c["root"]["readonly"] = True
linux = c["linux"]
# The host's network namespace (kubesim listens on its 127.0.0.1); no
# cgroup limits (crun runs with its cgroup manager off, below).
linux["namespaces"] = [n for n in linux["namespaces"] if n["type"] != "network"]
for k in ("cgroupsPath", "resources"):
    linux.pop(k, None)
json.dump(c, open(path, "w"), indent=1)
PY
# crun refuses a hybrid cgroup v1/v2 host (as on the CI machines); with its
# cgroup manager off it only needs a pure cgroup2 mount to look at, which a
# private mount namespace gives it without touching the host.
if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then
  crun run --bundle "$WORK/bundle" "$ID" >"$WORK/operator.log" 2>&1 &
else
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare -m sh -c 'mount --make-rprivate / && umount -l /sys/fs/cgroup &&
    mount -t cgroup2 none /sys/fs/cgroup && exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' \
    sh "$WORK/bundle" "$ID" >"$WORK/operator.log" 2>&1 &
fi
RUN_PID=$!
wait_for 20 "the operator to start in the container" grep -q "caches synced" "$WORK/operator.log"
pid=$(pgrep -f "^/openmed-operator --server $SIM_URL" | head -1)
[[ -n $pid ]] || die "no operator process from the container"
status=$(cat "/proc/$pid/status")
grep -qP '^Uid:\t65532\t65532' <<<"$status" || die "the container's process is not UID 65532"
grep -qP '^CapEff:\t0+$' <<<"$status" || die "the container's process holds capabilities"
grep -qP '^NoNewPrivs:\t1' <<<"$status" || die "no_new_privs is not set"
[[ $(readlink "/proc/$pid/ns/net") == "$(readlink /proc/self/ns/net)" ]] || die "not the host's network namespace"
root_opts=$(awk '$5 == "/" { print $6 }' "/proc/$pid/mountinfo" | tail -1)
[[ $root_opts == ro,* || $root_opts == ro ]] || die "the root filesystem is mounted $root_opts"
info "pid $pid: UID 65532, no capabilities, no_new_privs, read-only root, host network"
# shellcheck source=scripts/scenario.sh
source "$REPO/scripts/scenario.sh"
NS=openmed
TIMEOUT=60
scenario_ready
kill -TERM "$pid"
wait "$RUN_PID" || die "the container did not exit cleanly on SIGTERM: $(tail -3 "$WORK/operator.log")"
grep -q "stopped" "$WORK/operator.log" || die "no clean shutdown in the container's log"
say "image: $ARCHIVE runs under crun"

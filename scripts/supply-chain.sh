#!/usr/bin/env bash
# The air-gapped supply chain, end to end, as CI runs it:
#   1. vendor every crate (scripts/vendor.sh; the only step with a network)
#      and check each against Cargo.lock's checksum;
#   2. build the static binary offline, in a network namespace, in this tree
#      (scripts/build-static.sh --offline --check: static, no interpreter,
#      runs from an empty root);
#   3. build it again the way an air-gapped site does: unpack the carried
#      bundle in another directory and build offline there, beside step 2
#      (the two builds share the 2 cores; one after the other they took
#      twice as long); the two binaries must be identical, byte for byte;
#   4. validate the SBOM against CycloneDX 1.5's JSON schema;
#   5. make the image from each build (scripts/image.sh): the same digest;
#      check the first with skopeo, umoci and crun (the example OpenMedModel
#      reaches Ready in the container).
# Needs what build-static.sh and image.sh need, python3 with venv.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
start=$SECONDS
TARGET=x86_64-unknown-linux-musl

scripts/vendor.sh "$REPO/target/vendor-bundle"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
BUNDLE="$REPO/target/vendor-bundle/openmed-operator-$version-vendored.tar.gz"

say "The carried bundle, unpacked elsewhere and built offline there, beside this tree's build"
ELSEWHERE="$(mktemp -d "${TMPDIR:-/tmp}/omo-airgap.XXXXXX")"
ELSEWHERE_PID=""
trap '[[ -z $ELSEWHERE_PID ]] || kill -- "$ELSEWHERE_PID" 2>/dev/null || true; rm -rf "$ELSEWHERE"' EXIT
tar -C "$ELSEWHERE" -xzf "$BUNDLE"
(cd "$ELSEWHERE/openmed-operator-$version" &&
  exec scripts/build-static.sh --offline --out "$ELSEWHERE/out") >"$ELSEWHERE/build.log" 2>&1 &
ELSEWHERE_PID=$!

scripts/build-static.sh --offline --check --out "$REPO/target/static"
A="$REPO/target/static/$TARGET/release/openmed-operator"

say "The build elsewhere"
built=0
wait "$ELSEWHERE_PID" || built=$?
ELSEWHERE_PID=""
grep -v '^ *\(Compiling\|Checking\|Fresh\) ' "$ELSEWHERE/build.log" | sed 's/^/  | /'
((built == 0)) || die "the build elsewhere failed ($built); its log is above"
B="$ELSEWHERE/out/$TARGET/release/openmed-operator"
cmp "$A" "$B" || die "two builds of the same sources differ: $A $B"
cmp "$REPO/target/static/openmed-operator.cdx.json" "$ELSEWHERE/out/openmed-operator.cdx.json" ||
  die "the two builds' SBOMs differ"
info "identical: sha256 $(sha256sum "$A" | cut -d' ' -f1), $(stat -c %s "$A") bytes"

say "The SBOM against the CycloneDX 1.5 JSON schema"
VENV="$REPO/target/pyenv"
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import cyclonedx.validation.json, jsonschema' 2>/dev/null ||
  "$VENV/bin/pip" install -q "cyclonedx-python-lib[json-validation]==8.9.0"
"$VENV/bin/python" scripts/sbom.py --check "$REPO/target/static/openmed-operator.cdx.json" | sed 's/^/    /'

scripts/image.sh --bin "$A" --out "$REPO/target/image" --check
scripts/image.sh --bin "$B" --out "$ELSEWHERE/image" >/dev/null
archive="openmed-operator-$version.oci.tar"
cmp "$REPO/target/image/$archive" "$ELSEWHERE/image/$archive" || die "the two images differ"
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' \
  "$REPO/target/image/layout/index.json")
say "Supply chain: offline, reproducible, SBOM valid, image $digest runs ($((SECONDS - start)) s)"

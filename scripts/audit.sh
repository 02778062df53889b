#!/usr/bin/env bash
# The dependency audit, run before admitting the binary: list every crate
# compiled into the operator binary (and every build-time crate), with
# version, licence and source, and fail on
#   - a licence expression that the allow-list below cannot satisfy,
#   - a source other than the crates.io registry (no git, path or other
#     registries; the operator itself is the only path package),
#   - a direct dependency outside the approved set,
#   - a banned crate (no Kubernetes SDK, no async runtime, no OpenSSL).
# The allowed licences and the banned crates are read from deny.toml, the
# same policy `cargo deny check licenses bans sources` applies.
# Membership comes from `cargo tree` (feature-accurate); licence and source
# from `cargo metadata`. Needs: cargo, python3. Takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${AUDIT_TARGET:-x86_64-unknown-linux-gnu}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cargo metadata --format-version 1 --locked >"$tmp/meta.json"
cargo tree --locked -p openmed-operator --target "$TARGET" -e normal --prefix none --format '{p}' >"$tmp/normal.txt"
cargo tree --locked -p openmed-operator --target "$TARGET" -e normal,build --prefix none --format '{p}' >"$tmp/build.txt"
cargo tree --locked -p openmed-operator --target "$TARGET" -e normal --depth 1 --prefix none --format '{p}' >"$tmp/direct.txt"

python3 - "$tmp" <<'PY'
import json, re, sys, tomllib

tmp = sys.argv[1]
# Permissive licences only, and the banned crates: deny.toml's lists.
with open("deny.toml", "rb") as f:
    policy = tomllib.load(f)
ALLOWED = set(policy["licenses"]["allow"])
BANNED = {b["crate"]: b.get("reason", "") for b in policy["bans"]["deny"]}
# The runtime dependencies the project fixed; anything else must be argued.
# libc (for sigaction in src/signals.rs) and ring (key and signature for the
# metrics endpoint's self-signed certificate) were already in the graph, ring
# as rustls's crypto provider: naming them adds no crate.
APPROVED = {"ureq", "rustls", "serde", "serde_json", "sha2", "url", "tiny_http", "log", "env_logger", "libc", "ring"}
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"

meta = json.load(open(f"{tmp}/meta.json"))
by_nv = {(p["name"], p["version"]): p for p in meta["packages"]}

def members(path):
    out = set()
    for line in open(path):
        m = re.match(r"^(\S+) v(\S+)", line.strip())
        if m:
            out.add((m.group(1), m.group(2)))
    return out

def allowed(expr):
    """Can the SPDX expression be satisfied with ALLOWED licences?"""
    expr = expr.replace("/", " OR ")
    tokens = re.findall(r"\(|\)|[A-Za-z0-9.\-+]+(?: WITH [A-Za-z0-9.\-]+)?", expr)
    pos = 0
    def chain(op, operand, join):
        # operand() is called before join, so every token is consumed.
        nonlocal pos
        v = operand()
        while pos < len(tokens) and tokens[pos] == op:
            pos += 1
            v = join(operand(), v)
        return v
    def parse_or():
        return chain("OR", parse_and, lambda a, b: a or b)
    def parse_and():
        return chain("AND", parse_atom, lambda a, b: a and b)
    def parse_atom():
        nonlocal pos
        t = tokens[pos]; pos += 1
        if t == "(":
            v = parse_or(); pos += 1
            return v
        return t in ALLOWED
    try:
        return parse_or() and pos == len(tokens)
    except IndexError:
        return False

# The evaluator itself must be able to say no.
assert allowed("MIT OR Apache-2.0") and allowed("MIT/Apache-2.0") and allowed("(MIT OR Apache-2.0) AND Unicode-3.0")
assert {"kube", "k8s-openapi", "tokio", "openssl"} <= BANNED.keys(), "deny.toml lost a ban"
assert not allowed("GPL-3.0-only") and not allowed("MIT AND GPL-2.0") and not allowed("(none)")

normal = members(f"{tmp}/normal.txt")
build = members(f"{tmp}/build.txt") - normal
direct = members(f"{tmp}/direct.txt") - {("openmed-operator", p["version"]) for p in meta["packages"] if p["name"] == "openmed-operator"}
failures = []
rows = []
for kind, group in (("normal", normal), ("build", build)):
    for nv in sorted(group):
        p = by_nv.get(nv)
        if p is None:
            failures.append(f"{nv[0]} {nv[1]}: not in cargo metadata")
            continue
        lic = p.get("license") or "(none)"
        src = p.get("source") or "path"
        rows.append((kind, p["name"], p["version"], lic, "crates.io" if src == CRATES_IO else src))
        if p["name"] == "openmed-operator":
            continue
        if p["name"] in BANNED:
            failures.append(f"{p['name']} {p['version']}: banned ({BANNED[p['name']]})")
        if src != CRATES_IO:
            failures.append(f"{p['name']} {p['version']}: source {src} is not crates.io")
        if not allowed(lic):
            failures.append(f"{p['name']} {p['version']}: licence {lic!r} is outside the allow-list")
# url's IDNA back end stays the stub (idna_adapter 1.0, pinned in Cargo.lock):
# the 1.2 line brings ICU4X, 19 crates and 150 KB of Unicode tables a host
# name never needs (src/kube/idn.rs gives names their ASCII form).
for name, version in sorted(normal):
    if name == "idna_adapter" and not version.startswith("1.0."):
        failures.append(f"idna_adapter {version}: keep 1.0.x (cargo update -p idna_adapter --precise 1.0.0)")
for name, version in sorted(direct):
    if name not in APPROVED:
        failures.append(f"{name} {version}: direct dependency outside the approved set {sorted(APPROVED)}")

w = [max(len(r[i]) for r in rows) for i in range(4)]
print(f"{'kind':<{w[0]}}  {'crate':<{w[1]}}  {'version':<{w[2]}}  {'licence':<{w[3]}}  source")
for r in rows:
    print(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:<{w[3]}}  {r[4]}")
n_normal = len([r for r in rows if r[0] == "normal" and r[1] != "openmed-operator"])
n_build = len([r for r in rows if r[0] == "build"])
print(f"\n{n_normal} crates in the binary (besides openmed-operator), {n_build} more at build time only; "
      f"direct: {', '.join(sorted(n for n, _ in direct))}")
if failures:
    print("\nAUDIT FAILED:")
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("audit passed")
PY

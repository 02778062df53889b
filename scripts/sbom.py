#!/usr/bin/env python3
"""The operator binary's SBOM, in CycloneDX 1.5 JSON.

Every crate in the binary's graph (normal dependencies of openmed-operator
for the musl target, followed transitively, as `cargo tree -e normal`
lists them), each with version, licence, source, purl and the SHA-256
checksum Cargo.lock records; the binary itself as the BOM's subject, with
its own SHA-256; the dependency edges. Reproducible: the serial number is
derived from the binary's digest and the timestamp is SOURCE_DATE_EPOCH.

Usage: scripts/sbom.py BINARY OUT.json   (run from the repository root;
                                         needs cargo)
       scripts/sbom.py --check SBOM.json  (with cyclonedx-python-lib
                                         [json-validation]: validate it against
                                         CycloneDX 1.5's JSON schema)
"""
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import uuid
from datetime import datetime, timezone

TARGET = os.environ.get("SBOM_TARGET", "x86_64-unknown-linux-musl")
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def purl(name, version):
    return f"pkg:cargo/{name}@{version}"


def licence(expr):
    # Cargo's old "MIT/Apache-2.0" means "MIT OR Apache-2.0".
    return " OR ".join(p.strip() for p in expr.split("/")) if expr else "NOASSERTION"


def binary_graph():
    """(name, version) of each crate in the binary and its normal edges, from
    `cargo tree` (feature-accurate for this package alone, as the audit)."""
    out = subprocess.check_output(
        ["cargo", "tree", "--locked", "-p", "openmed-operator", "--target", TARGET,
         "-e", "normal", "--prefix", "depth", "--format", "{p}"], text=True)
    edges, stack = {}, []
    for line in out.splitlines():
        depth = len(line) - len(line.lstrip("0123456789"))
        name, version = line[depth:].split()[:2]
        node = (name, version.lstrip("v"))
        del stack[int(line[:depth]):]
        if stack:
            edges[stack[-1]].add(node)
        edges.setdefault(node, set())
        stack.append(node)
    return edges


def main(binary, out):
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", TARGET]))
    with open("Cargo.lock", "rb") as f:
        lock = tomllib.load(f)
    sums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}
    packages = {(p["name"], p["version"]): p for p in meta["packages"]}
    edges = binary_graph()
    root = next(k for k in edges if k[0] == "openmed-operator")
    with open(binary, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    ref = {pid: purl(*pid) for pid in edges}
    components = []
    for pid in sorted(edges):
        if pid == root:
            continue
        p = packages[pid]
        checksum = sums.get((p["name"], p["version"]))
        if p.get("source") != CRATES_IO or not checksum:
            sys.exit(f"sbom: {p['name']} {p['version']} is not a crates.io crate with a checksum")
        components.append({
            "type": "library",
            "bom-ref": ref[pid],
            "name": p["name"],
            "version": p["version"],
            "licenses": [{"expression": licence(p.get("license"))}],
            "purl": ref[pid],
            "hashes": [{"alg": "SHA-256", "content": checksum}],
            "externalReferences": [{
                "type": "distribution",
                "url": f"https://crates.io/api/v1/crates/{p['name']}/{p['version']}/download",
            }],
        })
    me = packages[root]
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.UUID(digest[:32], version=4)}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "openmed-operator scripts/sbom.py"}]},
            "component": {
                "type": "application",
                "bom-ref": ref[root],
                "name": me["name"],
                "version": me["version"],
                "description": me.get("description", ""),
                "licenses": [{"expression": licence(me.get("license"))}],
                "purl": ref[root],
                "hashes": [{"alg": "SHA-256", "content": digest}],
            },
        },
        "components": components,
        "dependencies": [{"ref": ref[pid], "dependsOn": sorted(ref[d] for d in deps)}
                         for pid, deps in sorted(edges.items())],
    }
    with open(out, "w") as f:
        json.dump(bom, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"sbom: {out}: {len(components)} components, binary sha256 {digest}")


def check(path):
    """Validate against the CycloneDX 1.5 JSON schema (strict), and show
    that the validator can fail: an unknown hash algorithm is refused."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    validator = JsonStrictValidator(SchemaVersion.V1_5)
    with open(path) as f:
        text = f.read()
    error = validator.validate_str(text)
    if error:
        sys.exit(f"sbom: {path} is not valid CycloneDX 1.5: {error}")
    broken = json.loads(text)
    broken["components"][0]["hashes"][0]["alg"] = "SHA-257"
    if not validator.validate_str(json.dumps(broken)):
        sys.exit("sbom: the validator accepted a broken SBOM")
    n = len(json.loads(text)["components"])
    print(f"sbom: {path}: valid CycloneDX 1.5 ({n} components)")


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        main(*sys.argv[1:3])

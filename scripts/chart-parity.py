#!/usr/bin/env python3
"""Parity of the Helm chart with the kustomize installs: object by object,
field by field.

    helm template openmed-operator charts/openmed-operator -n openmed-system >helm.yaml
    kubectl kustomize manifests/ >kustomize.yaml
    python3 parity.py helm.yaml kustomize.yaml --release-namespace openmed-system

    helm template openmed-operator charts/openmed-operator -n openmed-system \
      -f charts/openmed-operator/ci/namespaced-values.yaml >helm-ns.yaml
    kubectl kustomize manifests/overlays/namespaced >kustomize-ns.yaml
    python3 parity.py helm-ns.yaml kustomize-ns.yaml --release-namespace openmed-system

Objects are matched by (apiVersion group, kind, namespace, name). Before
comparing, only these differences are dropped, from metadata and from a pod
template's metadata alike:
- labels and annotations whose key starts with helm.sh/ (helm.sh/chart,
  helm.sh/resource-policy) or meta.helm.sh/ (helm install's ownership
  annotations; helm template writes none);
- app.kubernetes.io/managed-by, only when it is "Helm" on the chart's side
  and "kustomize" on kustomize's (any other value is a difference);
- on kustomize's side, the Namespace named --release-namespace: Helm's
  release namespace is not a chart object (the chart's README says which
  Pod Security label to put on it).
app.kubernetes.io/version is NOT dropped: the chart sets it to its
appVersion, which equals the manifests' version label. Nor is
app.kubernetes.io/instance: render with the release name openmed-operator.
Lists are compared in order (container args
are ordered), maps by key; a whole float equals the int (YAML writers
differ). Exit 1 on any difference; --self-test shows the check can fail.
Needs PyYAML.
"""
import argparse
import copy
import sys

import yaml

DROP_PREFIXES = ("helm.sh/", "meta.helm.sh/")
MANAGED_BY = "app.kubernetes.io/managed-by"


def load(path_or_text, is_text=False):
    text = path_or_text if is_text else open(path_or_text).read()
    return [d for d in yaml.safe_load_all(text) if d]


def key(obj):
    group = obj.get("apiVersion", "").rpartition("/")[0]
    md = obj.get("metadata", {})
    return (group, obj.get("kind"), md.get("namespace", ""), md.get("name"))


def show(k):
    group, kind, ns, name = k
    return f"{kind}{'.' + group if group else ''}/{ns + '/' if ns else ''}{name}"


def pod_template_metadata(obj):
    """The pod template's metadata of a workload, if it has one."""
    spec = obj.get("spec") or {}
    tmpl = spec.get("template") or (spec.get("jobTemplate") or {}).get("spec", {}).get("template")
    return tmpl.get("metadata") if isinstance(tmpl, dict) else None


def normalise_metadata(md, side):
    if not md:
        return
    for field in ("labels", "annotations"):
        m = md.get(field)
        if not m:
            continue
        for k in list(m):
            if k.startswith(DROP_PREFIXES):
                del m[k]
        if field == "labels" and m.get(MANAGED_BY) == {"helm": "Helm", "kustomize": "kustomize"}[side]:
            del m[MANAGED_BY]
        if not m:
            del md[field]


def normalise(obj, side):
    obj = copy.deepcopy(obj)
    normalise_metadata(obj.get("metadata"), side)
    normalise_metadata(pod_template_metadata(obj), side)
    return obj


def same_scalar(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def diff(a, b, path=""):
    """Differences between the chart's value a and kustomize's b."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in a:
                out.append(f"{p}: only in kustomize: {b[k]!r}")
            elif k not in b:
                out.append(f"{p}: only in helm: {a[k]!r}")
            else:
                out += diff(a[k], b[k], p)
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            p = f"{path}[{i}]"
            if i >= len(a):
                out.append(f"{p}: only in kustomize: {b[i]!r}")
            elif i >= len(b):
                out.append(f"{p}: only in helm: {a[i]!r}")
            else:
                out += diff(a[i], b[i], p)
        return out
    if not same_scalar(a, b):
        return [f"{path}: helm {a!r} != kustomize {b!r}"]
    return []


def compare(helm_docs, kust_docs, release_namespace):
    """(differences, notes): a list of lines each."""
    problems, notes = [], []
    sides = {}
    for side, docs in (("helm", helm_docs), ("kustomize", kust_docs)):
        objs = {}
        for d in docs:
            k = key(d)
            if side == "kustomize" and k[1] == "Namespace" and k[3] == release_namespace:
                notes.append(f"dropped {show(k)}: the Helm release namespace")
                continue
            if k in objs:
                problems.append(f"{side}: {show(k)} twice")
            objs[k] = normalise(d, side)
        sides[side] = objs
    helm, kust = sides["helm"], sides["kustomize"]
    for k in sorted(set(helm) | set(kust), key=lambda k: tuple(map(str, k))):
        if k not in helm:
            problems.append(f"{show(k)}: only in kustomize")
        elif k not in kust:
            problems.append(f"{show(k)}: only in helm")
        else:
            problems += [f"{show(k)}: {d}" for d in diff(helm[k], kust[k])]
    return problems, notes


SELF_TEST_KUSTOMIZE = """
apiVersion: v1
kind: Namespace
metadata: {name: openmed-system}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: op
  namespace: openmed-system
  labels: {app.kubernetes.io/managed-by: kustomize, app.kubernetes.io/version: 0.1.0}
spec:
  replicas: 2
  template:
    metadata:
      labels: {app.kubernetes.io/managed-by: kustomize, app.kubernetes.io/name: op}
    spec:
      containers: [{name: c, args: [--a, --b]}]
"""


def self_test():
    kust = load(SELF_TEST_KUSTOMIZE, is_text=True)
    helm = [copy.deepcopy(kust[1])]
    for md in (helm[0]["metadata"], helm[0]["spec"]["template"]["metadata"]):
        md["labels"][MANAGED_BY] = "Helm"
        md["labels"]["helm.sh/chart"] = "op-0.1.0"
    helm[0]["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
    ok, _ = compare(helm, kust, "openmed-system")
    assert ok == [], ok
    cases = {
        "a changed field": lambda h: h["spec"].__setitem__("replicas", 3),
        "another version label": lambda h: h["metadata"]["labels"].__setitem__("app.kubernetes.io/version", "0.2.0"),
        "a label lost from the pod template": lambda h: h["spec"]["template"]["metadata"]["labels"].pop("app.kubernetes.io/name"),
        "args reordered": lambda h: h["spec"]["template"]["spec"]["containers"][0].__setitem__("args", ["--b", "--a"]),
        "an extra object": lambda h: h.update({"extra": 1}),
    }
    for name, breaks in cases.items():
        h = copy.deepcopy(helm)
        breaks(h[0])
        if name == "an extra object":
            h.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "y"}})
        found, _ = compare(h, kust, "openmed-system")
        assert found, f"not caught: {name}"
    print("parity self-test: clean renders pass, 5 kinds of difference caught")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("helm", nargs="?")
    ap.add_argument("kustomize", nargs="?")
    ap.add_argument("--release-namespace", default="openmed-system")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return
    if not (a.helm and a.kustomize):
        ap.error("give HELM and KUSTOMIZE files, or --self-test")
    problems, notes = compare(load(a.helm), load(a.kustomize), a.release_namespace)
    for n in notes:
        print(f"note: {n}")
    for p in problems:
        print(f"DIFF {p}")
    n = len({key(d) for d in load(a.kustomize)})
    print(f"{a.helm} vs {a.kustomize}: {n} kustomize objects, {len(problems)} differences")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What the rendered installs must hold (docs/install.md), checked by
scripts/check-manifests.sh on the output of `kubectl kustomize`:

- the standard labels on every object and pod template, selectors untouched,
  and app.kubernetes.io/version equal to the image tag;
- the aggregated ClusterRoles that let namespace users manage (edit, admin)
  or read (view) OpenMedModels;
- the image: the release one, or an overlay's `images:` entry;
- the namespaced overlay's one parameter reaching every place it must.

Usage: check-installs.py DIR (holding cluster-wide.yaml, namespaced.yaml,
example-image.yaml and namespaced-team-a.yaml). Needs PyYAML.
"""
import sys

import yaml

STANDARD = ["name", "instance", "version", "component", "part-of", "managed-by"]
EDIT_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
READ_VERBS = {"get", "list", "watch"}


def label_problems(docs):
    out = []
    tags = {image(docs).rsplit(":", 1)[-1]}
    for d in docs:
        where = f"{d['kind']}/{d['metadata']['name']}"
        labels = d["metadata"].get("labels", {})
        for key in STANDARD:
            if f"app.kubernetes.io/{key}" not in labels:
                out.append(f"{where}: no app.kubernetes.io/{key}")
        if labels.get("app.kubernetes.io/version") not in tags:
            out.append(f"{where}: version {labels.get('app.kubernetes.io/version')} is not the image tag {tags}")
        if d["kind"] == "Deployment":
            pod = d["spec"]["template"]["metadata"]["labels"]
            out += [f"{where}: pod template without {k}" for k in STANDARD
                    if k != "managed-by" and f"app.kubernetes.io/{k}" not in pod]
            # The installing tool stays off pod templates: moving to Helm restarts no pod.
            if "app.kubernetes.io/managed-by" in pod:
                out.append(f"{where}: pod template with managed-by")
            if d["spec"]["selector"] != {"matchLabels": {"app.kubernetes.io/name": "openmed-operator"}}:
                out.append(f"{where}: the selector changed: {d['spec']['selector']}")
    return out


def image(docs):
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    return dep["spec"]["template"]["spec"]["containers"][0]["image"]


def granted(role, resource):
    verbs = set()
    for rule in role.get("rules", []):
        if "openmed.ai" in rule.get("apiGroups", []) and resource in rule.get("resources", []):
            verbs |= set(rule.get("verbs", []))
    return verbs


def user_role_problems(docs):
    roles = [d for d in docs if d["kind"] == "ClusterRole"]
    agg = lambda r, to: r["metadata"].get("labels", {}).get(f"rbac.authorization.k8s.io/aggregate-to-{to}") == "true"
    out = []
    for to in ["edit", "admin"]:
        if not any(agg(r, to) and granted(r, "openmedmodels") >= EDIT_VERBS for r in roles):
            out.append(f"no ClusterRole aggregated to {to} manages openmedmodels")
    views = [r for r in roles if agg(r, "view")]
    if not any(granted(r, "openmedmodels") == READ_VERBS and granted(r, "openmedmodels/status") == READ_VERBS for r in views):
        out.append("no ClusterRole aggregated to view reads openmedmodels and their status")
    if any(granted(r, res) - READ_VERBS for r in views for res in ["openmedmodels", "openmedmodels/status"]):
        out.append("a role aggregated to view may write openmedmodels")
    return out


def scope_problems(docs, ns):
    out = []
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    if names != {ns, "openmed-system"}:
        out.append(f"namespaces {names}, not {ns} and openmed-system")
    for d in docs:
        # The leader-election Role lives with the operator and its Lease.
        home = "openmed-system" if d["metadata"]["name"].endswith("-leader-election") else ns
        if d["kind"] in ("Role", "RoleBinding") and d["metadata"].get("namespace") != home:
            out.append(f"{d['kind']} {d['metadata']['name']} in {d['metadata'].get('namespace')}, not {home}")
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    if f"--namespace={ns}" not in args:
        out.append(f"operator args {args} lack --namespace={ns}")
    return out


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def main(out_dir):
    installs = {n: load(f"{out_dir}/{n}.yaml") for n in ["cluster-wide", "namespaced", "example-image", "namespaced-team-a"]}
    problems = []
    for name, docs in installs.items():
        problems += [f"{name}: {p}" for p in label_problems(docs) + user_role_problems(docs)]
    problems += [f"namespaced: {p}" for p in scope_problems(installs["namespaced"], "openmed")]
    problems += [f"team-a: {p}" for p in scope_problems(installs["namespaced-team-a"], "team-a")]
    for name, want in [("cluster-wide", "ghcr.io/openmed-ai/openmed-operator:0.1.0"),
                       ("example-image", "registry.example/openmed-operator:0.1.0")]:
        if image(installs[name]) != want:
            problems.append(f"{name}: image {image(installs[name])}, not {want}")
    # The checks must be able to fail: a copy with a label and a verb gone.
    broken = yaml.safe_load(yaml.safe_dump_all(installs["cluster-wide"]).split("\n---\n")[0])
    broken["metadata"]["labels"].pop("app.kubernetes.io/instance")
    roles = [d for d in installs["cluster-wide"] if d["kind"] != "ClusterRole"]
    if not label_problems([broken] + [d for d in installs["cluster-wide"] if d["kind"] == "Deployment"]) \
            or not user_role_problems(roles) or not scope_problems(installs["namespaced"], "team-a"):
        problems.append("a check did not catch a broken install")
    with open("Cargo.toml") as f:
        crate = next(l.split('"')[1] for l in f if l.startswith("version = "))
    if image(installs["cluster-wide"]).rsplit(":", 1)[-1] != crate:
        problems.append(f"the image tag is not the crate's version {crate}")
    for p in problems:
        print(f"check-installs: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"{len(installs)} installs: standard labels, user roles, images and the namespace parameter hold")


if __name__ == "__main__":
    main(sys.argv[1])

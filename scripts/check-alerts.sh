#!/usr/bin/env bash
# The alerts, checked by promtool (built by the control plane's tools module,
# tests/control-plane/promtool): `promtool check rules` on the rule groups of
# manifests/monitoring/prometheusrule.yaml, then `promtool test rules` on the
# unit tests in tests/alerts/ (each alert fires after its `for:`, with its
# labels and annotations, and not on the series that must not fire it).
# A PrometheusRule is the Prometheus Operator's wrapper: promtool reads the
# rule file inside it, spec.groups, which this writes out as rules.yaml.
#
# Usage: scripts/check-alerts.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"
# shellcheck source=scripts/control-plane-lib.sh
source "$REPO/scripts/control-plane-lib.sh"

cp_build >/dev/null
promtool="$(cp_bin_dir promtool)/promtool"
[[ -x $promtool ]] || die "no promtool at $promtool"
info "$("$promtool" --version 2>&1 | head -1)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - manifests/monitoring/prometheusrule.yaml "$work/rules.yaml" <<'PY' || die "cannot read the rule groups"
import sys, yaml
with open(sys.argv[1]) as f:
    doc = yaml.safe_load(f)
assert doc["kind"] == "PrometheusRule", doc.get("kind")
groups = doc["spec"]["groups"]
assert groups, "no rule groups"
with open(sys.argv[2], "w") as f:
    yaml.safe_dump({"groups": groups}, f, sort_keys=False)
PY
tests=(tests/alerts/*.test.yaml)
[[ -e ${tests[0]} ]] || die "no alert tests in tests/alerts/"
cp "${tests[@]}" "$work/"

say "promtool check rules (manifests/monitoring/prometheusrule.yaml)"
"$promtool" check rules "$work/rules.yaml" || die "promtool check rules failed"

# Every alert has a test that expects it to fire.
python3 - "$work/rules.yaml" "${tests[@]}" <<'PY' || die "an alert has no test that fires it"
import sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
fired = set()
for path in sys.argv[2:]:
    for t in yaml.safe_load(open(path))["tests"]:
        for a in t.get("alert_rule_test", []):
            if a.get("exp_alerts"):
                fired.add(a["alertname"])
missing = sorted(alerts - fired)
if missing:
    sys.exit(f"alerts no test fires: {', '.join(missing)}")
print(f"    {len(alerts)} alerts, each fired by a test")
PY

say "promtool test rules (tests/alerts/)"
"$promtool" test rules "$work"/*.test.yaml || die "promtool test rules failed"

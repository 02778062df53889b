//! The chart (charts/openmed-operator) installed with the real helm (the
//! tools module's v4.3.2) on a control plane of its own: install, upgrades,
//! uninstall and a reinstall, and the move of a kustomize install to Helm
//! (docs/install.md). The chart's own Deployment cannot run the operator
//! here (the stand-in kubelet runs no image), so each test runs the operator
//! from the release itself: the container's arguments and environment and
//! the ServiceAccount of the Deployment `helm get manifest` renders, with a
//! token for that ServiceAccount, restarted on each upgrade.

use crate::harness::{tmpdir, wait_for, wait_until, Operator};
use crate::plane::{OwnPlane, Plane};
use crate::story::{Story, V1};
use serde_json::Value;
use std::path::Path;

const RELEASE: &str = "openmed-operator";
const NS: &str = "openmed-system";
const CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/openmedmodels.openmed.ai";

/// A plane of the test's own (Helm's objects are cluster-wide, as the
/// shared plane's kustomize install is), and the operator's namespace.
fn own_plane(name: &str) -> Option<(OwnPlane, Plane, std::path::PathBuf)> {
    crate::plane::from_env()?;
    let dir = tmpdir(name);
    let own = OwnPlane::up(&dir.join("plane"), "");
    let plane = Plane::open(&dir.join("plane"));
    Some((own, plane, dir))
}

/// The operator's namespace, labelled as the chart's README says.
fn release_namespace(plane: &Plane) {
    plane
        .kubectl(&["create", "namespace", NS])
        .expect("namespace");
    let psa = "pod-security.kubernetes.io/enforce=restricted";
    plane
        .kubectl(&["label", "namespace", NS, psa])
        .expect("labelling the namespace");
}

/// The release's operator Deployment, from `helm get manifest` (YAML made
/// JSON by kubectl, client side).
fn released_deployment(plane: &Plane) -> Value {
    let manifest = plane
        .helm(&["get", "manifest", RELEASE, "-n", NS])
        .expect("helm get manifest");
    let json = plane
        .kubectl_with_input(
            &["create", "--dry-run=client", "-o", "json", "-f", "-"],
            Some(&manifest),
        )
        .expect("the release's manifest as JSON");
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(|o| o.expect("kubectl's JSON"))
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == RELEASE)
        .unwrap_or_else(|| panic!("the release renders no Deployment {RELEASE}:\n{manifest}"))
}

/// The operator as Deployment `dep` runs it: its container's arguments and
/// environment, as its ServiceAccount. Its listening addresses move to free
/// loopback ports (tests use 127.0.0.0/8 only, many at once); the pod's
/// own fields (POD_NAME, POD_NAMESPACE) are a fixed pod of `dep`'s namespace.
fn start_as_deployed(plane: &Plane, dep: &Value, dir: &Path) -> Operator {
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let ns = dep["metadata"]["namespace"].as_str().unwrap_or(NS);
    let sa = pod["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount");
    let token = dir.join("released-token");
    std::fs::write(&token, plane.token(ns, sa)).expect("writing the token");
    let mut args: Vec<String> = c["args"]
        .as_array()
        .expect("the container's args")
        .iter()
        .filter_map(|a| a.as_str())
        .map(|a| match a.split_once('=') {
            Some((flag, _)) if flag.ends_with("-addr") => format!("{flag}=127.0.0.1:0"),
            _ => a.to_string(),
        })
        .collect();
    let files = [
        ("--token-file", token.display().to_string()),
        ("--ca-file", plane.ca.display().to_string()),
    ];
    for (flag, file) in files {
        args.extend([flag.to_string(), file]);
    }
    let pod_name = format!("{RELEASE}-0");
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().unwrap_or_default().to_string();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod_name.clone(),
                Some("metadata.namespace") => ns.to_string(),
                _ => e["value"].as_str().unwrap_or_default().to_string(),
            };
            (name, value)
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut op = Operator::start_bin(&crate::operator_bin(), &plane.server, dir, &args, &env);
    op.wait_ready();
    op
}

/// The rendered pod is locked down (the restricted Pod Security Standard's
/// fields), and its probes name the health port its flags give, on which
/// the operator started from it answers them.
fn assert_pod_spec(dep: &Value, op: &mut Operator) {
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{sc}");
    assert_eq!(sc["runAsNonRoot"], true, "{sc}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{sc}"
    );
    let health_port = c["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str()?.strip_prefix("--health-addr="))
        .filter_map(|a| a.rsplit_once(':')?.1.parse::<i64>().ok())
        .next_back()
        .expect("--health-addr in the args");
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        let port = match &get["port"] {
            Value::String(name) => c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == *name)
                .map(|p| p["containerPort"].clone())
                .unwrap_or(Value::Null),
            n => n.clone(),
        };
        assert_eq!(
            port, health_port,
            "{probe} is not on the health port: {get}"
        );
        let path = get["path"].as_str().expect("a probe path");
        assert_eq!(op.http_get(path).0, 200, "{probe} {path}");
    }
}

/// What a rollout or a restart changes: each Deployment's pod template and
/// each pod's uid, in `namespaces`. Not the generation: kube-apiserver bumps
/// it for a change of the Deployment's annotations too (upstream
/// `deploymentStrategy.PrepareForUpdate`), which adopting by Helm makes.
fn snapshot(plane: &Plane, namespaces: &[&str]) -> Vec<String> {
    use crate::cluster::Cluster;
    let mut seen = Vec::new();
    for ns in namespaces {
        for d in plane.objects("apps", "deployments", Some(ns)) {
            let template = &d["spec"]["template"];
            seen.push(format!(
                "deployment {ns}/{} template {template}",
                d["metadata"]["name"]
            ));
        }
        for p in plane.objects("", "pods", Some(ns)) {
            let md = &p["metadata"];
            seen.push(format!("pod {ns}/{} uid {}", md["name"], md["uid"]));
        }
    }
    seen.sort();
    seen
}

/// The ConfigMaps the operator wrote in namespace `apps`, by name and uid.
fn operators_config_maps(plane: &Plane) -> Vec<String> {
    use crate::cluster::Cluster;
    let mut out: Vec<String> = plane
        .objects("", "configmaps", Some("apps"))
        .iter()
        .filter(|c| c["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "openmed-operator")
        .map(|c| format!("{} {}", c["metadata"]["name"], c["metadata"]["uid"]))
        .collect();
    out.sort();
    out
}

/// Long enough for a restarted operator to act on every model: several of
/// the harness's 2 s resyncs.
fn let_it_reconcile() {
    std::thread::sleep(std::time::Duration::from_secs(7));
}

/// A copy of the chart whose CRD gained `spec.notes`, as a newer chart.
fn chart_with_a_new_field(dir: &Path) -> String {
    let next = dir.join("chart-next");
    let src = format!("{}/charts/openmed-operator", env!("CARGO_MANIFEST_DIR"));
    let copied = std::process::Command::new("cp")
        .args(["-r", &src])
        .arg(&next)
        .status()
        .expect("cp");
    assert!(copied.success());
    let path = next.join("files/crd.json");
    let mut crd: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("crd.json"))
        .expect("crd.json is JSON");
    for v in crd["spec"]["versions"].as_array_mut().expect("versions") {
        let spec = &mut v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        spec["notes"] = serde_json::json!({"type": "string", "description": "Free text."});
    }
    std::fs::write(&path, crd.to_string()).expect("writing crd.json");
    let chart = next.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart).expect("Chart.yaml");
    std::fs::write(
        &chart,
        text.replacen("\nversion: 0.1.0", "\nversion: 0.1.1", 1),
    )
    .expect("writing Chart.yaml");
    next.display().to_string()
}

/// A model with `spec.notes`, applied with strict field validation
/// (dry run): Ok when the served CRD knows the field.
fn notes_accepted(plane: &Plane, ns: &str) -> Result<String, String> {
    let m = format!(
        "apiVersion: openmed.ai/v1alpha1\nkind: OpenMedModel\nmetadata: {{name: noted, namespace: {ns}}}\n\
         spec: {{family: PII, version: {V1}, tier: Small, replicas: 1, notes: hello,\n  \
         rolloutStrategy: {{type: RollingUpdate}}}}\n"
    );
    let args = ["apply", "--dry-run=server", "--validate=strict", "-f", "-"];
    plane.kubectl_with_input(&args, Some(&m))
}

/// `helm install` with the defaults: the operator started from the release
/// turns a model Ready; `helm upgrade` to a changed value (JSON logs) reaches
/// the restarted operator and restarts no model's pod; `helm upgrade` to a
/// chart whose CRD gained a field serves it; `helm uninstall` keeps the CRD
/// and the model; `helm install` again picks them up with zero rollouts.
#[test]
fn helm_installs_upgrades_uninstalls_and_reinstalls() {
    let Some((_own, plane, dir)) = own_plane("helm") else {
        return;
    };
    release_namespace(&plane);
    let chart = "charts/openmed-operator";
    let out = plane
        .helm(&["install", RELEASE, chart, "-n", NS])
        .expect("helm install");
    assert!(out.contains("STATUS: deployed"), "{out}");
    let crd = "crd/openmedmodels.openmed.ai";
    plane
        .kubectl(&["wait", "--for=condition=Established", "--timeout=60s", crd])
        .expect("the CRD served");
    let dep = released_deployment(&plane);
    let mut op = start_as_deployed(&plane, &dep, &dir);
    assert_pod_spec(&dep, &mut op);
    let st = Story::new(&plane, "apps");
    st.deployment("a", 1, true);
    st.model("a", "a", V1, 600);
    st.wait_serving("a", V1);
    let before = snapshot(&plane, &["apps"]);

    let json_logs = ["--set", "extraArgs={--log-format=json}"];
    plane
        .helm(&[&["upgrade", RELEASE, chart, "-n", NS][..], &json_logs[..]].concat())
        .expect("helm upgrade to JSON logs");
    op.assert_clean_exit();
    let dep = released_deployment(&plane);
    let mut op = start_as_deployed(&plane, &dep, &dir);
    let_it_reconcile();
    let log = op.log();
    assert!(
        !log.is_empty() && log.lines().all(|l| l.starts_with('{')),
        "the upgraded value did not reach the operator (JSON logs):\n{log}"
    );
    assert_eq!(
        snapshot(&plane, &["apps"]),
        before,
        "an upgrade restarted pods"
    );

    let refused = notes_accepted(&plane, "apps").expect_err("spec.notes before the CRD has it");
    assert!(refused.contains("notes"), "{refused}");
    let next = chart_with_a_new_field(&dir);
    plane
        .helm(&[&["upgrade", RELEASE, &next, "-n", NS][..], &json_logs[..]].concat())
        .expect("helm upgrade to a chart whose CRD gained a field");
    op.assert_clean_exit();
    let mut op = start_as_deployed(&plane, &released_deployment(&plane), &dir);
    let _ = wait_for(
        "spec.notes to be served",
        || notes_accepted(&plane, "apps"),
        Result::is_ok,
    );
    let_it_reconcile();
    assert_eq!(
        snapshot(&plane, &["apps"]),
        before,
        "the CRD's upgrade restarted pods"
    );

    let written = operators_config_maps(&plane);
    assert!(
        !written.is_empty(),
        "the operator wrote no ConfigMap for model a"
    );
    let out = plane
        .helm(&["uninstall", RELEASE, "-n", NS])
        .expect("helm uninstall");
    op.assert_clean_exit();
    assert!(out.contains("kept due to the resource policy"), "{out}");
    assert_eq!(
        plane.request("GET", CRD, None).0,
        200,
        "the CRD went with the release"
    );
    let path = "/apis/apps/v1/namespaces/openmed-system/deployments/openmed-operator";
    wait_until("the release's Deployment to go", || {
        plane.request("GET", path, None).0 == 404
    });
    let role = "/apis/rbac.authorization.k8s.io/v1/clusterroles/openmed-operator";
    assert_eq!(
        plane.request("GET", role, None).0,
        404,
        "the operator's ClusterRole stayed"
    );
    assert_eq!(
        operators_config_maps(&plane),
        written,
        "what the operator wrote went"
    );
    assert!(
        st.status("a")["phase"].is_string(),
        "model a went with the release"
    );

    plane
        .helm(&["install", RELEASE, &next, "-n", NS])
        .expect("helm install over the kept CRD");
    let mut op = start_as_deployed(&plane, &released_deployment(&plane), &dir);
    let_it_reconcile();
    st.wait_serving("a", V1);
    assert_eq!(
        snapshot(&plane, &["apps"]),
        before,
        "a reinstall restarted pods"
    );
    op.assert_clean_exit();
}

/// docs/install.md, "From kustomize to Helm", step by step: a cluster
/// installed with `kubectl apply -k manifests/` moves to the chart with
/// every object adopted, no model lost, no Deployment changed and no pod
/// restarted, the operator's own included.
#[test]
fn a_kustomize_install_moves_to_helm_without_a_restart() {
    let Some((_own, plane, dir)) = own_plane("helm-move") else {
        return;
    };
    let manifests = format!("{}/manifests", env!("CARGO_MANIFEST_DIR"));
    plane
        .kubectl(&["apply", "-k", &manifests])
        .expect("kubectl apply -k manifests/");
    let crd = "crd/openmedmodels.openmed.ai";
    plane
        .kubectl(&["wait", "--for=condition=Established", "--timeout=60s", crd])
        .expect("the CRD served");
    let dep = plane
        .kubectl(&["-n", NS, "get", "deployment", RELEASE, "-o", "json"])
        .expect("the installed Deployment");
    let dep: Value = serde_json::from_str(&dep).expect("JSON");
    let mut op = start_as_deployed(&plane, &dep, &dir);
    let st = Story::new(&plane, "apps");
    st.deployment("a", 1, true);
    st.model("a", "a", V1, 600);
    st.wait_serving("a", V1);
    let before = snapshot(&plane, &["apps", NS]);

    let chart = "charts/openmed-operator";
    let rendered = plane
        .helm(&["template", RELEASE, chart, "-n", NS])
        .expect("helm template");
    let (name, namespace) = (
        format!("meta.helm.sh/release-name={RELEASE}"),
        format!("meta.helm.sh/release-namespace={NS}"),
    );
    let owned = [
        vec!["label", "app.kubernetes.io/managed-by=Helm"],
        vec!["annotate", &name, &namespace],
    ];
    for pairs in &owned {
        let args = [&pairs[..1], &["--overwrite", "-f", "-"], &pairs[1..]].concat();
        plane
            .kubectl_with_input(&args, Some(&rendered))
            .unwrap_or_else(|e| panic!("kubectl {pairs:?}: {e}"));
    }
    let out = plane
        .helm(&["install", RELEASE, chart, "-n", NS])
        .expect("helm install over the kustomize install");
    assert!(out.contains("STATUS: deployed"), "{out}");
    op.assert_clean_exit();
    let mut op = start_as_deployed(&plane, &released_deployment(&plane), &dir);
    let_it_reconcile();
    st.wait_serving("a", V1);
    assert_eq!(
        snapshot(&plane, &["apps", NS]),
        before,
        "moving to Helm changed a Deployment or restarted a pod"
    );
    op.assert_clean_exit();
}

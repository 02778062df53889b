//! Who may read /metrics, decided by the real API server's TokenReview and
//! SubjectAccessReview, with a binding made as docs/security.md tells a user.

use crate::harness::{tls_get, tmpdir};
use crate::plane::from_env;
use crate::story::Story;
use crate::{install, operator_on_real};

/// 401 without a token, 403 for a ServiceAccount nobody bound, 200 for one
/// bound to `openmed-operator-metrics-reader` by `kubectl create
/// clusterrolebinding` (upstream `TokenReview` and `SubjectAccessReview`
/// REST storage, authorized by the RBAC authorizer).
#[test]
fn metrics_answer_as_the_real_api_server_reviews() {
    let Some(plane) = from_env() else { return };
    let _plane = crate::shared();
    install::once(&plane);
    let id = std::process::id();
    let (ns, mon) = (format!("metrics-{id}"), format!("monitoring-{id}"));
    let dir = tmpdir("metrics-real");
    let _st = Story::new(&plane, &ns);
    let kc = |args: &[&str]| {
        plane
            .kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    };
    kc(&["create", "namespace", &mon]);
    kc(&["-n", &mon, "create", "serviceaccount", "prometheus"]);
    kc(&["-n", &mon, "create", "serviceaccount", "nosy"]);
    let binding = format!("prometheus-openmed-metrics-{id}");
    kc(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=openmed-operator-metrics-reader",
        &format!("--serviceaccount={mon}:prometheus"),
    ]);
    let prometheus = kc(&["-n", &mon, "create", "token", "prometheus"])
        .trim()
        .to_string();
    let nosy = kc(&["-n", &mon, "create", "token", "nosy"])
        .trim()
        .to_string();
    let mut op = operator_on_real(&plane, &ns, &dir, &["--metrics-addr", "127.0.0.1:0"]);
    let addr = op.metrics_addr();
    let scrape =
        |token: Option<&str>| tls_get(addr, "/metrics", token, None).expect("a TLS answer");
    let anonymous = scrape(None);
    assert_eq!(anonymous.code, 401, "{}", anonymous.head);
    assert_eq!(scrape(Some("forged-token")).code, 401);
    assert_eq!(scrape(Some(&nosy)).code, 403);
    let ok = scrape(Some(&prometheus));
    assert_eq!(ok.code, 200, "{}", ok.head);
    assert!(
        ok.body.contains("openmed_operator_managed_resources"),
        "{}",
        ok.body
    );
    op.assert_clean_exit();
    assert!(
        !op.log().contains(&prometheus),
        "a caller's token was logged"
    );
    let _ = plane.kubectl(&["delete", "clusterrolebinding", &binding]);
    let _ = plane.kubectl(&["delete", "namespace", &mon, "--wait=false"]);
}

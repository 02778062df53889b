//! Tokens, reviews and the built-in roles as upstream's registries and
//! controllers make them: TokenRequest
//! (`pkg/registry/core/serviceaccount/storage/token.go`, `TokenREST.Create`),
//! TokenReview (`pkg/registry/authentication/tokenreview`, `REST.Create`,
//! audiences as `authenticator.Audiences.Intersect`) and
//! SubjectAccessReview (`ValidateSubjectAccessReviewSpec`,
//! `pkg/apis/authorization/validation`); the bootstrap ClusterRoles
//! (`bootstrappolicy.ClusterRoles`) filled by
//! `ClusterRoleAggregationController.syncClusterRole`.

mod common;

use common::{api, Api};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};

const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
const SAS: &str = "/api/v1/namespaces/default/serviceaccounts";
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

fn admin(sim: &Sim) -> Api {
    let mut a = api(sim);
    a.token = Some("admin".into());
    a
}

fn start() -> Sim {
    Sim::start(SimConfig {
        tokens: Some(vec!["admin".into()]),
        ..SimConfig::default()
    })
    .unwrap()
}

fn review(a: &Api, token: &str, audiences: &[&str]) -> Value {
    let r = a.post(
        TOKEN_REVIEWS,
        json!({"spec": {"token": token, "audiences": audiences}}),
    );
    assert_eq!(r.code, 201, "{}", r.body);
    r.body["status"].clone()
}

#[test]
fn token_requests_are_bound_to_their_audiences_and_reviews_say_who_and_for_whom() {
    let sim = start();
    let a = admin(&sim);
    let sa = a.post(SAS, json!({"metadata": {"name": "bot"}})).body;
    let uid = sa["metadata"]["uid"].as_str().unwrap().to_string();

    // TokenREST.Create: the account must exist; at least 10 minutes.
    let r = a.post(&format!("{SAS}/ghost/token"), json!({"spec": {}}));
    assert_eq!(r.code, 404, "{}", r.body);
    let r = a.post(
        &format!("{SAS}/bot/token"),
        json!({"spec": {"expirationSeconds": 60}}),
    );
    assert_eq!(r.code, 422, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(msg.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"), "{msg}");

    let r = a.post(
        &format!("{SAS}/bot/token"),
        json!({"spec": {"audiences": ["vault"]}}),
    );
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["kind"], "TokenRequest");
    assert_eq!(r.body["spec"]["expirationSeconds"], 3600);
    assert!(r.body["status"]["expirationTimestamp"].is_string());
    let vault = r.body["status"]["token"].as_str().unwrap().to_string();

    // Reviewed for its own audience: the user, the account's uid, the
    // token's credential id, and the audiences both sides share.
    let who = review(&a, &vault, &["vault", "other"]);
    assert_eq!(who["authenticated"], true, "{who}");
    assert_eq!(who["user"]["username"], "system:serviceaccount:default:bot");
    assert_eq!(who["user"]["uid"], uid.as_str());
    let jti = &who["user"]["extra"]["authentication.kubernetes.io/credential-id"][0];
    assert!(jti.as_str().unwrap().starts_with("JTI="), "{who}");
    assert_eq!(who["audiences"], json!(["vault"]));

    // For the API server's audience (the default) it is no one.
    let who = review(&a, &vault, &[]);
    assert_eq!(who["authenticated"], Value::Null, "{who}");
    assert_eq!(who["user"], json!({}));
    let want = format!(
        "token audiences [\"vault\"] is invalid for the target audiences [\"{API_AUDIENCE}\"]"
    );
    assert_eq!(who["error"], want.as_str());
    let mut as_bot = api(&sim);
    as_bot.token = Some(vault);
    assert_eq!(
        as_bot.get("/api/v1/namespaces/default/configmaps").code,
        401
    );

    // A token for the API: authenticated, then judged by RBAC.
    let r = a.post(&format!("{SAS}/bot/token"), json!({"spec": {}}));
    as_bot.token = r.body["status"]["token"].as_str().map(str::to_string);
    let who = review(&a, as_bot.token.as_deref().unwrap(), &[]);
    assert_eq!(who["audiences"], json!([API_AUDIENCE]), "{who}");
    assert_eq!(
        as_bot.get("/api/v1/namespaces/default/configmaps").code,
        403
    );

    let r = a.post(TOKEN_REVIEWS, json!({"spec": {"token": ""}}));
    assert_eq!(r.code, 400, "{}", r.body);
    assert_eq!(
        r.body["message"],
        "token is required for TokenReview in authentication"
    );
}

#[test]
fn token_requests_are_listed_in_discovery() {
    let sim = start();
    let v1 = admin(&sim).get("/api/v1").body;
    let token = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(token["group"], "authentication.k8s.io", "{token}");
    assert_eq!(token["kind"], "TokenRequest");
    assert_eq!(token["verbs"], json!(["create"]));
}

/// `ValidateSubjectAccessReviewSpec`'s cases: exactly one kind of
/// attributes, and a user or a group.
#[test]
fn subject_access_reviews_without_a_question_or_a_subject_are_invalid() {
    let sim = start();
    let a = admin(&sim);
    let res = json!({"verb": "get", "resource": "pods", "namespace": "default"});
    let non = json!({"verb": "get", "path": "/metrics"});
    let cases = [
        (json!({"user": "me"}), vec!["spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"]),
        (json!({"user": "me", "resourceAttributes": res, "nonResourceAttributes": non}),
            vec!["spec: Invalid value: \"\": exactly one of nonResourceAttributes or resourceAttributes must be specified"]),
        (json!({"resourceAttributes": res}), vec!["spec.user: Invalid value: \"\": at least one of user or group must be specified"]),
        (json!({}), vec![
            "spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            "spec.user: Invalid value: \"\": at least one of user or group must be specified"]),
    ];
    for (spec, want) in cases {
        let r = a.post(ACCESS_REVIEWS, json!({"spec": spec}));
        assert_eq!(r.code, 422, "{spec}: {}", r.body);
        let msg = r.body["message"].as_str().unwrap();
        assert!(
            msg.starts_with("SubjectAccessReview.authorization.k8s.io \"\" is invalid: "),
            "{msg}"
        );
        for w in want {
            assert!(msg.contains(w), "{spec}: {msg}");
        }
    }
    // A group alone is someone to ask about: system:masters may do all
    // (the bootstrap cluster-admin binding), system:authenticated not this.
    for (group, allowed) in [("system:masters", true), ("system:authenticated", false)] {
        let r = a.post(
            ACCESS_REVIEWS,
            json!({"spec": {"groups": [group], "resourceAttributes": res}}),
        );
        assert_eq!(r.code, 201, "{}", r.body);
        assert_eq!(r.body["status"]["allowed"], allowed, "{group}");
    }
}

/// `admin`, `edit` and `view` start empty and are filled from the
/// `system:aggregate-to-*` roles; `view` feeds `edit`, which feeds `admin`.
/// Those names hold a `:`, which `ValidateRBACName` (a path segment)
/// allows: the roles exist at all only because of that rule.
#[test]
fn the_built_in_roles_are_aggregated_from_the_bootstrap_ones() {
    let sim = start();
    let a = admin(&sim);
    let role = |name: &str| {
        let r = a.get(&format!(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"
        ));
        assert_eq!(r.code, 200, "{name}: {}", r.body);
        r.body
    };
    let grants = |role: &Value, verb: &str, resource: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
                && r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == resource)
        })
    };
    for name in [
        "system:aggregate-to-admin",
        "system:aggregate-to-edit",
        "system:aggregate-to-view",
    ] {
        assert_eq!(
            role(name)["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
    }
    let (admin_role, edit, view) = (role("admin"), role("edit"), role("view"));
    assert!(grants(&view, "get", "configmaps") && !grants(&view, "create", "configmaps"));
    assert!(grants(&edit, "create", "configmaps") && grants(&edit, "get", "configmaps"));
    assert!(!grants(&edit, "create", "rolebindings"));
    assert!(
        grants(&admin_role, "create", "rolebindings")
            && grants(&admin_role, "create", "configmaps")
    );
    assert_eq!(role("cluster-admin")["rules"][0]["verbs"], json!(["*"]));
}

/// `ServiceAccountsController.syncNamespace`: a new namespace gets its
/// `default` ServiceAccount, so `kubectl create token default` works there.
#[test]
fn every_namespace_gets_a_default_service_account() {
    let sim = start();
    let a = admin(&sim);
    assert_eq!(
        a.post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
            .code,
        201
    );
    let path = "/api/v1/namespaces/team/serviceaccounts/default";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while a.get(path).code != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "no default ServiceAccount in team"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = a.post(&format!("{path}/token"), json!({"spec": {}}));
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(
        a.get("/api/v1/namespaces/default/serviceaccounts/default")
            .code,
        200
    );
}

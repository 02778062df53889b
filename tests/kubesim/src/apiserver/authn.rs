//! Who a bearer token is, and the API's own questions about it.
//!
//! A [`Credential`] is what a service account token carries: the user, the
//! service account's uid, the audiences it was issued for, its `extra`
//! and an expiry. The authenticator accepts a token for API requests only
//! if it is meant for the API server's audience, as the service account
//! token authenticator does (`authenticator.Audiences`).
//!
//! The reviews are upstream's registries: TokenReview
//! (`pkg/registry/authentication/tokenreview`, `REST.Create`),
//! SubjectAccessReview (`pkg/registry/authorization/subjectaccessreview`,
//! validated by `ValidateSubjectAccessReviewSpec`) and TokenRequest
//! (`pkg/registry/core/serviceaccount/storage/token.go`).

use super::api::{lock, rbac_allows, Shared};
use super::errors::{ApiErr, Cause};
use crate::rbac::User;
use crate::registry::resources::str_list;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The API server's audience (`--api-audiences`, defaulted from the
/// service account issuer).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// `extra` key under which a bound token names its JWT ID.
const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// At most this many tokens are remembered; the ones nearest expiry go
/// first, so that a client asking for tokens in a loop holds bounded memory.
const MAX_TOKENS: usize = 10_000;

/// What a token stands for.
#[derive(Debug, Clone)]
pub struct Credential {
    pub user: User,
    pub uid: String,
    pub audiences: Vec<String>,
    pub extra: Map<String, Value>,
    pub expires: Option<SystemTime>,
}

impl Credential {
    /// A service account's token meant for the API server, with no expiry
    /// (a legacy token, or one a test hands out).
    pub fn service_account(ns: &str, name: &str, uid: String) -> Credential {
        Credential {
            user: User::service_account(ns, name),
            uid,
            audiences: vec![API_AUDIENCE.into()],
            extra: Map::new(),
            expires: None,
        }
    }

    fn live(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|e| e > now)
    }
}

/// Remember `token` as `cred`, forgetting expired tokens and, past
/// [`MAX_TOKENS`], those closest to expiry.
pub fn remember(users: &mut HashMap<String, Credential>, token: String, cred: Credential) {
    let now = SystemTime::now();
    users.retain(|_, c| c.live(now));
    while users.len() >= MAX_TOKENS {
        let soonest = users
            .iter()
            .filter_map(|(t, c)| c.expires.map(|e| (e, t.clone())))
            .min();
        match soonest {
            Some((_, t)) => users.remove(&t),
            None => break,
        };
    }
    users.insert(token, cred);
}

/// The service account's uid, if it is stored.
fn service_account_uid(shared: &Shared, ns: &str, name: &str) -> Option<String> {
    let st = lock(&shared.store);
    let def = st.registry.find("", "v1", "serviceaccounts")?;
    let sa = st.get(def, ns, name)?;
    sa["metadata"]["uid"].as_str().map(str::to_string)
}

/// A token for `ns/name` meant for the API server, as a legacy token is.
pub fn issue_service_account_token(shared: &Shared, ns: &str, name: &str) -> String {
    let token = format!("sa-{ns}-{name}-{:x}", shared.started.elapsed().as_nanos());
    let uid = service_account_uid(shared, ns, name).unwrap_or_default();
    let cred = Credential::service_account(ns, name, uid);
    remember(&mut lock(&shared.users), token.clone(), cred);
    token
}

/// The user a token authenticates as for an API request: a live token
/// whose audiences include the API server's.
pub fn user_for_api(shared: &Shared, token: &str) -> Option<User> {
    let users = lock(&shared.users);
    let c = users.get(token)?;
    let meant = c.audiences.iter().any(|a| a == API_AUDIENCE);
    (meant && c.live(SystemTime::now())).then(|| c.user.clone())
}

/// Whether `token` is one of the admin tokens (which RBAC does not apply to).
fn is_admin(shared: &Shared, token: &str) -> bool {
    lock(&shared.tokens)
        .as_ref()
        .is_some_and(|t| t.iter().any(|t| t == token))
}

/// TokenReview's `status`: the user a token is for the audiences asked
/// (the API server's when none are), or why it is not.
pub fn token_review(shared: &Shared, spec: &Value) -> Result<Value, ApiErr> {
    let token = spec["token"].as_str().unwrap_or("");
    if token.is_empty() {
        return Err(ApiErr::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let mut wanted = str_list(spec.get("audiences"));
    if wanted.is_empty() {
        wanted = vec![API_AUDIENCE.into()];
    }
    let cred = lock(&shared.users).get(token).cloned();
    let cred = cred.filter(|c| c.live(SystemTime::now()));
    // Admin tokens are audience-agnostic: valid for the API's audience
    // only (`WrapAudienceAgnosticToken`).
    let (user, uid, issued, extra) = match cred {
        Some(c) => (c.user, c.uid, c.audiences, c.extra),
        None if is_admin(shared, token) => {
            let admin = User {
                name: "kubesim-admin".into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            };
            (admin, String::new(), vec![API_AUDIENCE.into()], Map::new())
        }
        None => return Ok(json!({"user": {}, "error": "invalid bearer token"})),
    };
    let both: Vec<&String> = wanted.iter().filter(|a| issued.contains(a)).collect();
    if both.is_empty() {
        let error =
            format!("token audiences {issued:?} is invalid for the target audiences {wanted:?}");
        return Ok(json!({"user": {}, "error": error}));
    }
    let mut u = json!({"username": user.name, "groups": user.groups});
    if !uid.is_empty() {
        u["uid"] = json!(uid);
    }
    if !extra.is_empty() {
        u["extra"] = Value::Object(extra);
    }
    Ok(json!({"authenticated": true, "user": u, "audiences": both}))
}

/// `ValidateSubjectAccessReviewSpec`: exactly one kind of attributes, and
/// someone to ask about.
fn validate_access_review(spec: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (res, non) = (
        spec["resourceAttributes"].is_object(),
        spec["nonResourceAttributes"].is_object(),
    );
    if res == non {
        let why = "exactly one of nonResourceAttributes or resourceAttributes must be specified";
        let shown = if res { json!("") } else { Value::Null };
        causes.push(Cause::invalid("spec", &shown, why));
    }
    let user = spec["user"].as_str().unwrap_or("");
    if user.is_empty() && str_list(spec.get("groups")).is_empty() {
        causes.push(Cause::invalid(
            "spec.user",
            &json!(""),
            "at least one of user or group must be specified",
        ));
    }
    causes
}

/// SubjectAccessReview's `status`: RBAC's verdict for the user asked
/// about, from the same roles and bindings as every request.
pub fn subject_access_review(shared: &Shared, spec: &Value) -> Result<Value, ApiErr> {
    let causes = validate_access_review(spec);
    if !causes.is_empty() {
        let group = "authorization.k8s.io";
        return Err(ApiErr::invalid_kind(
            group,
            "SubjectAccessReview",
            "",
            causes,
        ));
    }
    let user = User {
        name: spec["user"].as_str().unwrap_or("").to_string(),
        groups: str_list(spec.get("groups")),
    };
    let a = if let Some(n) = spec["nonResourceAttributes"].as_object() {
        let s = |k: &str| n.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        crate::rbac::Request {
            verb: s("verb"),
            path: Some(s("path")),
            ..Default::default()
        }
    } else {
        let r = &spec["resourceAttributes"];
        let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
        crate::rbac::Request {
            verb: s("verb"),
            api_group: s("group"),
            resource: s("resource"),
            subresource: s("subresource"),
            namespace: s("namespace"),
            name: s("name"),
            path: None,
        }
    };
    Ok(json!({"allowed": rbac_allows(shared, &user, &a)}))
}

/// TokenRequest on `serviceaccounts/NAME/token`: a bound token for an
/// existing service account, for the audiences asked (the API server's by
/// default), valid `expirationSeconds` (3600 by default, at least 600).
pub fn token_request(
    shared: &Shared,
    ns: &str,
    name: &str,
    mut body: Value,
) -> Result<Value, ApiErr> {
    let Some(uid) = service_account_uid(shared, ns, name) else {
        return Err(ApiErr::new(
            404,
            "NotFound",
            format!("serviceaccounts {name:?} not found"),
        ));
    };
    let spec = &body["spec"];
    let seconds = spec["expirationSeconds"].as_i64().unwrap_or(3600);
    if seconds < 600 {
        let cause = Cause::invalid(
            "spec.expirationSeconds",
            &json!(seconds),
            "may not specify a duration less than 10 minutes",
        );
        return Err(ApiErr::invalid_kind(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            vec![cause],
        ));
    }
    let mut audiences = str_list(spec.get("audiences"));
    if audiences.is_empty() {
        audiences = vec![API_AUDIENCE.into()];
    }
    let jti = crate::registry::store::random_suffix() + &crate::registry::store::random_suffix();
    let token = format!("tr-{ns}-{name}-{jti}");
    let expires = SystemTime::now() + Duration::from_secs(seconds as u64);
    let mut extra = Map::new();
    extra.insert(CREDENTIAL_ID.into(), json!([format!("JTI={jti}")]));
    let cred = Credential {
        user: User::service_account(ns, name),
        uid,
        audiences: audiences.clone(),
        extra,
        expires: Some(expires),
    };
    remember(&mut lock(&shared.users), token.clone(), cred);
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["kind"] = json!("TokenRequest");
    body["metadata"]["name"] = json!(name);
    body["metadata"]["namespace"] = json!(ns);
    body["spec"]["audiences"] = json!(audiences);
    body["spec"]["expirationSeconds"] = json!(seconds);
    let at = super::time::rfc3339(expires);
    body["status"] = json!({"token": token, "expirationTimestamp": at});
    Ok(body)
}

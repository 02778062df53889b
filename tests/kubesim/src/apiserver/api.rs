//! Request routing and the API verbs: discovery, get, list, watch, create,
//! update, patch, delete, plus auth, faults and accounting around them.
//! A watch, once routed, is served by [`crate::apiserver::watch`].

use crate::apiserver::errors::{ApiErr, Cause};
use crate::apiserver::faults::{Faults, RequestRecord, Stats};
use crate::apiserver::http::{HttpServer, Request, Response};
use crate::apiserver::patch;
use crate::apiserver::selector::{FieldSelector, LabelSelector};
use crate::apiserver::table;
use crate::apiserver::watch::watch;
use crate::registry::kinds::FieldValidation;
use crate::registry::resources::{Registry, ResourceDef};
use crate::registry::scale;
use crate::registry::store::{Preconditions, Propagation, Retention, Store};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

pub struct Shared {
    pub store: Mutex<Store>,
    pub changed: Condvar,
    pub faults: Mutex<Faults>,
    pub stats: Mutex<Stats>,
    pub tokens: Mutex<Option<Vec<String>>>,
    /// Tokens of users RBAC applies to (service accounts): token → what
    /// it stands for.
    pub users: Mutex<std::collections::HashMap<String, super::authn::Credential>>,
    pub watch_epoch: AtomicU64,
    /// Bumped to end every open watch cleanly, with its final chunk.
    pub watch_end_epoch: AtomicU64,
    pub stopping: AtomicBool,
    pub bookmark_interval: Duration,
    pub http: OnceLock<Arc<HttpServer>>,
    pub started: Instant,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(
        history: Retention,
        tokens: Option<Vec<String>>,
        bookmark_interval: Duration,
    ) -> Shared {
        let mut store = Store::new(history.events);
        store.retention = history;
        Shared {
            store: Mutex::new(store),
            changed: Condvar::new(),
            faults: Mutex::new(Faults::default()),
            stats: Mutex::new(Stats::default()),
            tokens: Mutex::new(tokens),
            users: Mutex::new(Default::default()),
            watch_epoch: AtomicU64::new(0),
            watch_end_epoch: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            bookmark_interval,
            http: OnceLock::new(),
            started: Instant::now(),
        }
    }

    /// Run a write against a throw-away copy of the store: what a dry run
    /// does (`DryRunnableStorage`: every step but the commit).
    pub fn dry_write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let mut scratch = lock(&self.store).scratch();
        f(&mut scratch)
    }

    /// Run a write against the store and wake every watch.
    pub fn write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let mut st = lock(&self.store);
        let out = f(&mut st);
        drop(st);
        self.changed.notify_all();
        out
    }
}

fn err(e: ApiErr) -> Response {
    let mut r = Response::json(e.code, &e.status());
    if let Some(ra) = e.retry_after {
        r = r.header("Retry-After", &ra.to_string());
    }
    r
}

fn ok(code: u16, v: &Value) -> Response {
    Response::json(code, v)
}

enum Route {
    Version,
    Health,
    ApiRoot,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiV3,
    OpenApiV3Doc(String, String),
    Res(Box<Res>),
    NotFound,
}

pub(crate) struct Res {
    pub(crate) def: ResourceDef,
    pub(crate) version: String,
    pub(crate) ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn route(reg: &Registry, path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz"] | ["readyz"] | ["livez"] => return Route::Health,
        ["api"] => return Route::ApiRoot,
        ["apis"] => return Route::Apis,
        ["apis", g] => return Route::Group(g.to_string()),
        ["openapi", "v3"] => return Route::OpenApiV3,
        ["openapi", "v3", "api", v] => return Route::OpenApiV3Doc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => {
            return Route::OpenApiV3Doc(g.to_string(), v.to_string())
        }
        ["api", v] => return Route::GroupVersion(String::new(), v.to_string()),
        ["apis", g, v] => return Route::GroupVersion(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return Route::NotFound,
    };
    let find = |plural: &str| reg.find(&group, &version, plural).cloned();
    let res = |def: Option<ResourceDef>,
               ns: Option<&str>,
               name: Option<&str>,
               sub: Option<&str>| match def {
        Some(def) => Route::Res(Box::new(Res {
            def,
            version: version.clone(),
            ns: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        })),
        None => Route::NotFound,
    };
    match rest {
        [plural] => res(find(plural), None, None, None),
        ["namespaces", ns, sub] if *sub == "status" || *sub == "finalize" => {
            res(find("namespaces"), None, Some(ns), Some(sub))
        }
        ["namespaces", ns, plural] => match find(plural) {
            Some(d) if d.namespaced => res(Some(d), Some(ns), None, None),
            _ => Route::NotFound,
        },
        ["namespaces", ns, plural, name] => match find(plural) {
            Some(d) if d.namespaced => res(Some(d), Some(ns), Some(name), None),
            _ => Route::NotFound,
        },
        ["namespaces", ns, plural, name, sub] => match find(plural) {
            Some(d) if d.namespaced => res(Some(d), Some(ns), Some(name), Some(sub)),
            _ => Route::NotFound,
        },
        [plural, name] => match find(plural) {
            Some(d) if !d.namespaced => res(Some(d), None, Some(name), None),
            _ => Route::NotFound,
        },
        [plural, name, sub] => match find(plural) {
            Some(d) if !d.namespaced => res(Some(d), None, Some(name), Some(sub)),
            _ => Route::NotFound,
        },
        _ => Route::NotFound,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Json,
    Table,
    /// `as=PartialObjectMetadata`: one object (a get, or each watch event).
    Partial,
    /// `as=PartialObjectMetadataList`: a list.
    PartialList,
}

pub(crate) fn output_of(req: &Request) -> Output {
    let accept = req.header("accept").unwrap_or("");
    let first = accept.split(',').next().unwrap_or("");
    let target = first
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("as="));
    match target {
        Some("Table") => Output::Table,
        Some("PartialObjectMetadata") => Output::Partial,
        Some("PartialObjectMetadataList") => Output::PartialList,
        _ => Output::Json,
    }
}

/// The Go type the real server names in a 406 (`%T` of its internal type).
fn go_type(def: &ResourceDef, list: bool) -> String {
    let suffix = if list { "List" } else { "" };
    if def.custom {
        return format!("*unstructured.Unstructured{suffix}");
    }
    let pkg = match def.group.split('.').next().unwrap_or("") {
        "" => "core",
        other => other,
    };
    format!("*{pkg}.{}{suffix}", def.kind)
}

/// `asPartialObjectMetadata` / `asPartialObjectMetadataList` refusing the
/// wrong shape (endpoints/handlers/response.go `errNotAcceptable`).
fn not_acceptable(msg: String) -> ApiErr {
    ApiErr::new(406, "NotAcceptable", msg)
}

fn verb_of(req: &Request, r: &Route) -> &'static str {
    match r {
        Route::Res(res) => res_verb(req, res),
        Route::NotFound => "other",
        _ => "discovery",
    }
}

/// The API verb of a resource request (`RequestInfoFactory`'s).
fn res_verb(req: &Request, res: &Res) -> &'static str {
    match (req.method.as_str(), res.name.is_some()) {
        ("GET", false) if is_watch(req) => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

fn is_watch(req: &Request) -> bool {
    matches!(req.q("watch"), Some("1") | Some("true"))
}

/// Serve one API request.
pub fn handle(shared: &Arc<Shared>, req: Request) -> Response {
    let at_ms = shared.started.elapsed().as_millis() as u64;
    let latency = lock(&shared.faults).latency;
    if !latency.is_zero() {
        std::thread::sleep(latency);
    }
    let (verb, resource, resp) = if let Some(resp) = cut_off(shared, &req) {
        ("cut off", String::new(), resp)
    } else {
        let st = lock(&shared.store);
        let r = route(&st.registry, &req.path);
        drop(st);
        let verb = verb_of(&req, &r);
        let resource = match &r {
            Route::Res(res) => match &res.sub {
                Some(s) => format!("{}/{s}", res.def.plural),
                None => res.def.plural.clone(),
            },
            _ => String::new(),
        };
        let resp = serve(shared, &req, r);
        (verb, resource, resp)
    };
    lock(&shared.stats).record(RequestRecord {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.raw_query.clone(),
        content_type: req.header("content-type").unwrap_or("").to_string(),
        status: resp.status,
        verb: verb.to_string(),
        resource,
        user_agent: req.header("user-agent").unwrap_or("").to_string(),
        accept: req.header("accept").unwrap_or("").to_string(),
        at_ms,
    });
    resp
}

/// The answer to a client cut off by User-Agent ([`crate::Sim::cut_off`]):
/// refused at once, or held unanswered while the cut lasts (at most two
/// minutes).
fn cut_off(shared: &Arc<Shared>, req: &Request) -> Option<Response> {
    let ua = req.header("user-agent").unwrap_or("");
    let how = lock(&shared.faults).cut_off_for(ua, &req.path)?;
    if how == crate::apiserver::faults::CutOff::Hang {
        let t = std::time::Instant::now();
        while lock(&shared.faults).cut_off_for(ua, &req.path).is_some()
            && t.elapsed() < std::time::Duration::from_secs(120)
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        return Some(err(ApiErr::new(
            504,
            "Timeout",
            "cut off (simulated partition)",
        )));
    }
    Some(err(ApiErr::new(
        503,
        "ServiceUnavailable",
        "cut off (simulated partition)",
    )))
}

/// Who the request is (the authenticator): a user's token names the user
/// (RBAC applies); an admin token, or no token while authentication is
/// off, is allowed everything (None); anything else is refused.
fn authenticate(shared: &Shared, req: &Request) -> Result<Option<crate::rbac::User>, ()> {
    let presented = req
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    if let Some(user) = presented.and_then(|p| super::authn::user_for_api(shared, p)) {
        return Ok(Some(user));
    }
    match lock(&shared.tokens).as_ref() {
        None => Ok(None),
        Some(tokens) if presented.is_some_and(|p| tokens.iter().any(|t| t == p)) => Ok(None),
        Some(_) => Err(()),
    }
}

/// The authorizer's view of a resource request.
fn attributes(req: &Request, res: &Res) -> crate::rbac::Request {
    crate::rbac::Request {
        verb: res_verb(req, res).to_string(),
        api_group: res.def.group.clone(),
        resource: res.def.plural.clone(),
        subresource: res.sub.clone().unwrap_or_default(),
        namespace: res.ns.clone().unwrap_or_default(),
        name: res.name.clone().unwrap_or_default(),
        path: None,
    }
}

/// RBAC's verdict on `a` for `user`, from the roles and bindings stored.
pub(crate) fn rbac_allows(
    shared: &Shared,
    user: &crate::rbac::User,
    a: &crate::rbac::Request,
) -> bool {
    let st = lock(&shared.store);
    rbac_allows_in(&st, user, a)
}

fn rbac_allows_in(
    st: &crate::registry::store::Store,
    user: &crate::rbac::User,
    a: &crate::rbac::Request,
) -> bool {
    let all = |plural: &str| -> Vec<Value> {
        st.registry
            .by_key(&format!("rbac.authorization.k8s.io/{plural}"))
            .map(|def| st.list(def, None).iter().map(|o| (**o).clone()).collect())
            .unwrap_or_default()
    };
    let (roles, cluster_roles) = (all("roles"), all("clusterroles"));
    let (role_bindings, cluster_role_bindings) = (all("rolebindings"), all("clusterrolebindings"));
    let policy = crate::rbac::Policy {
        roles: &roles,
        cluster_roles: &cluster_roles,
        role_bindings: &role_bindings,
        cluster_role_bindings: &cluster_role_bindings,
    };
    crate::rbac::allows(&policy, user, a)
}

/// The OwnerReferencesPermissionEnforcement admission plugin
/// (`plugin/pkg/admission/gc`, `gcPermissionsEnforcement.Validate`): an
/// update that changes `ownerReferences` at all needs `delete` on the
/// object itself (a create does not: its creator could have not made it);
/// a blocking reference that is new (`newBlockingOwnerDeletionRefs`: no old
/// reference has its uid, or that one did not block) needs `update` on the
/// owner's `finalizers`.
fn owner_refs_admitted(
    shared: &Shared,
    user: &crate::rbac::User,
    res: &Res,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiErr> {
    let st = lock(&shared.store);
    owner_refs_admitted_in(&st, user, res, new, old)
}

fn owner_refs_admitted_in(
    st: &crate::registry::store::Store,
    user: &crate::rbac::User,
    res: &Res,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiErr> {
    let refs = |o: Option<&Value>| -> Vec<Value> {
        o.and_then(|o| o["metadata"]["ownerReferences"].as_array().cloned())
            .unwrap_or_default()
    };
    let (before, after) = (refs(old), refs(Some(new)));
    // `isChangingOwnerReference`; pods/status is on the plugin's whitelist.
    let whitelisted = res.def.plural == "pods" && res.sub.as_deref() == Some("status");
    let changing = match old {
        None => !after.is_empty(),
        Some(_) => before != after,
    };
    if whitelisted || !changing {
        return Ok(());
    }
    let ns = res.ns.as_deref().unwrap_or("");
    if old.is_some() {
        let delete = crate::rbac::Request {
            verb: "delete".into(),
            api_group: res.def.group.clone(),
            resource: res.def.plural.clone(),
            subresource: res.sub.clone().unwrap_or_default(),
            namespace: ns.into(),
            name: res.name.clone().unwrap_or_default(),
            path: None,
        };
        if !rbac_allows_in(st, user, &delete) {
            return Err(ApiErr::new(
                403,
                "Forbidden",
                format!(
                    "cannot set an ownerRef on a resource you can't delete: {}",
                    crate::rbac::forbidden_message(user, &delete)
                ),
            ));
        }
    }
    let blocks = |r: &Value| r["blockOwnerDeletion"] == true;
    let is_new = |r: &&Value| !before.iter().any(|o| o["uid"] == r["uid"] && blocks(o));
    for r in after.iter().filter(|r| blocks(r)).filter(is_new) {
        let api_version = r["apiVersion"].as_str().unwrap_or("");
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let kind = r["kind"].as_str().unwrap_or("");
        let Some(def) = st.registry.by_kind(api_version, kind) else {
            continue;
        };
        let a = crate::rbac::Request {
            verb: "update".into(),
            api_group: group.into(),
            resource: def.plural.clone(),
            subresource: "finalizers".into(),
            namespace: ns.into(),
            name: r["name"].as_str().unwrap_or("").into(),
            path: None,
        };
        if !rbac_allows_in(st, user, &a) {
            // admission.NewForbidden: a 403 naming the check.
            return Err(ApiErr::new(
                403,
                "Forbidden",
                format!(
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}",
                    crate::rbac::forbidden_message(user, &a)
                ),
            ));
        }
    }
    Ok(())
}

fn forbidden(user: &crate::rbac::User, a: &crate::rbac::Request) -> Response {
    let mut e = ApiErr::new(403, "Forbidden", crate::rbac::forbidden_message(user, a));
    e.details = json!({"name": a.name, "group": a.api_group, "kind": a.resource});
    err(e)
}

fn serve(shared: &Arc<Shared>, req: &Request, r: Route) -> Response {
    if matches!(r, Route::Version | Route::Health) {
        return match r {
            Route::Version => ok(
                200,
                &json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-kubesim", "gitCommit": "kubesim", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc", "platform": "linux/amd64"}),
            ),
            _ => Response::with_type(200, "text/plain", b"ok".to_vec()),
        };
    }
    let failure = lock(&shared.faults).take_failure(&req.method, &req.path, &req.raw_query);
    if let Some((code, retry_after)) = failure {
        let reason = match code {
            429 => "TooManyRequests",
            409 => "Conflict",
            410 => "Expired",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        let mut e = ApiErr::new(code, reason, format!("injected fault: {code}"));
        e.retry_after = retry_after;
        return err(e);
    }
    let Ok(user) = authenticate(shared, req) else {
        return err(ApiErr::new(401, "Unauthorized", "Unauthorized"));
    };
    // Discovery and OpenAPI are every authenticated user's
    // (`system:discovery`); resources are RBAC's to grant.
    if let (Some(user), Route::Res(res)) = (&user, &r) {
        let a = attributes(req, res);
        if !rbac_allows(shared, user, &a) {
            return forbidden(user, &a);
        }
    }
    let st = lock(&shared.store);
    let found = match &r {
        Route::ApiRoot => Some(Registry::api_versions()),
        Route::Apis => Some(st.registry.api_group_list()),
        Route::Group(g) => st.registry.api_group(g),
        Route::GroupVersion(g, v) => st.registry.resource_list(g, v),
        Route::OpenApiV3 => Some(st.registry.openapi_root()),
        Route::OpenApiV3Doc(g, v) => st.registry.openapi_doc(g, v),
        _ => None,
    };
    drop(st);
    if let Some(v) = found {
        return ok(200, &v);
    }
    match r {
        Route::Res(res) => match serve_resource(shared, req, *res, user.as_ref()) {
            Ok(resp) => resp,
            Err(e) => err(e),
        },
        _ => err(ApiErr::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

fn parse_body(req: &Request) -> Result<Value, ApiErr> {
    let ct = req.header("content-type").unwrap_or("");
    if ct.contains("protobuf") {
        use super::protobuf::{decode, DecodeError};
        return decode(&req.body).map_err(|e| match e {
            DecodeError::Unsupported(gvk) => ApiErr::new(
                415,
                "UnsupportedMediaType",
                format!("kubesim decodes protobuf only for the kinds kubectl's generators send, not {gvk}: send JSON"),
            ),
            DecodeError::Malformed(why) => ApiErr::bad_request(format!(
                "the body of the request was in an unknown format: protobuf: {why}"
            )),
        });
    }
    serde_json::from_slice(&req.body).map_err(|e| {
        ApiErr::bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        ))
    })
}

/// Present a stored object at the version the client asked for.
fn present(obj: &Value, res: &Res) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = json!(res.def.api_version(&res.version));
    o
}

pub(crate) fn partial(o: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
}

pub(crate) fn selectors(
    req: &Request,
    def: &ResourceDef,
) -> Result<(LabelSelector, FieldSelector), ApiErr> {
    let l =
        LabelSelector::parse(req.q("labelSelector").unwrap_or("")).map_err(ApiErr::bad_request)?;
    let f = FieldSelector::parse(req.q("fieldSelector").unwrap_or(""), &def.kind)
        .map_err(ApiErr::bad_request)?;
    Ok((l, f))
}

fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        r = r.header("Warning", &format!("299 - {w:?}"));
    }
    r
}

fn serve_resource(
    shared: &Arc<Shared>,
    req: &Request,
    res: Res,
    user: Option<&crate::rbac::User>,
) -> Result<Response, ApiErr> {
    let now = SystemTime::now();
    let ns = res.ns.clone().unwrap_or_default();
    let def = res.def.clone();
    let fv = FieldValidation::parse(req.q("fieldValidation"));
    let dry = dry_run(req)?;
    if let (Some("scale"), Some(name)) = (res.sub.as_deref(), &res.name) {
        if def.scale_subresource {
            return serve_scale(shared, req, &def, &ns, name, now);
        }
    }
    if let (Some("token"), Some(name), "POST") =
        (res.sub.as_deref(), &res.name, req.method.as_str())
    {
        if def.plural == "serviceaccounts" {
            let body = super::authn::token_request(shared, &ns, name, parse_body(req)?)?;
            return Ok(ok(201, &body));
        }
    }
    if req.method == "GET" && res.name.is_none() && is_watch(req) {
        return watch(shared, req, res);
    }
    let call = Call {
        shared,
        req,
        res: &res,
        ns,
        user,
        fv,
        dry,
        now,
    };
    match (req.method.as_str(), &res.name) {
        ("GET", None) => list(shared, req, &res),
        ("GET", Some(name)) => call.get(name),
        ("POST", None) if def.is_review() => {
            let mut body = parse_body(req)?;
            body["status"] = if def.plural == "tokenreviews" {
                super::authn::token_review(shared, &body["spec"])?
            } else {
                super::authn::subject_access_review(shared, &body["spec"])?
            };
            Ok(ok(201, &body))
        }
        (_, _) if def.is_review() => Err(ApiErr::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({})",
                def.plural
            ),
        )),
        ("POST", None) => call.create(),
        ("PUT", Some(name)) => call.replace(name),
        ("PATCH", Some(name)) => call.patch(name),
        ("DELETE", Some(name)) => call.delete(name),
        ("DELETE", None) => call.delete_collection(),
        _ => Err(ApiErr::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({})",
                req.method
            ),
        )),
    }
}

/// One request on a resource, past routing and RBAC: what the handlers of
/// its verbs share.
struct Call<'a> {
    shared: &'a Arc<Shared>,
    req: &'a Request,
    res: &'a Res,
    /// The request's namespace ("" for cluster-scoped kinds).
    ns: String,
    /// The authenticated caller, when RBAC is on.
    user: Option<&'a crate::rbac::User>,
    fv: FieldValidation,
    /// `dryRun=All`: everything but the commit.
    dry: bool,
    now: SystemTime,
}

impl Call<'_> {
    /// Run the write on the store, or on a copy for a dry run.
    fn write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        if self.dry {
            self.shared.dry_write(f)
        } else {
            self.shared.write(f)
        }
    }

    fn get(&self, name: &str) -> Result<Response, ApiErr> {
        let (shared, req, res, def, ns) = self.parts();
        sub_is_status(res)?;
        let st = lock(&shared.store);
        let obj = st
            .get(def, ns, name)
            .ok_or_else(|| ApiErr::not_found(def, name))?;
        let rv = st.rv.to_string();
        drop(st);
        Ok(ok(200, &render_one(req, res, &obj, &rv, self.now)?))
    }

    fn create(&self) -> Result<Response, ApiErr> {
        let (shared, req, res, def, ns) = self.parts();
        let body = parse_body(req)?;
        if let Some(k) = body["kind"].as_str() {
            if k != def.kind {
                return Err(ApiErr::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    def.kind
                )));
            }
        }
        if let Some(u) = self.user {
            owner_refs_admitted(shared, u, res, &body, None)?;
        }
        let w = self.write(|st| st.create(def, ns, body, self.fv, self.now))?;
        Ok(with_warnings(ok(201, &present(&w.obj, res)), &w.warnings))
    }

    /// PUT: replace the object (or its status).
    fn replace(&self, name: &str) -> Result<Response, ApiErr> {
        let (shared, req, res, def, ns) = self.parts();
        let body = parse_body(req)?;
        let status_only = sub_is_status(res)?;
        if let Some(u) = self.user {
            let old = lock(&shared.store).get(def, ns, name);
            owner_refs_admitted(shared, u, res, &body, old.as_deref())?;
        }
        // `AllowUnconditionalUpdate` is false for custom resources and
        // Leases; `AllowCreateOnUpdate` is true for Leases (leaseStrategy).
        let lease = def.key() == "coordination.k8s.io/leases";
        let (w, code) = self.write(|st| {
            if lease && !status_only && st.get(def, ns, name).is_none() {
                return create_on_update(st, def, ns, name, body, self.fv, self.now)
                    .map(|w| (w, 201));
            }
            let require_rv = def.custom || lease;
            st.update(
                def,
                ns,
                name,
                body,
                status_only,
                self.fv,
                require_rv,
                self.now,
            )
            .map(|w| (w, 200))
        })?;
        Ok(with_warnings(ok(code, &present(&w.obj, res)), &w.warnings))
    }

    fn patch(&self, name: &str) -> Result<Response, ApiErr> {
        let (_, req, res, def, ns) = self.parts();
        let status_only = sub_is_status(res)?;
        let body = parse_body(req)?;
        let ct = content_type(req);
        let w = self.write(|st| {
            let current = st
                .get(def, ns, name)
                .ok_or_else(|| ApiErr::not_found(def, name))?;
            let patched = apply_patch(&ct, &current, &body, def.custom)?;
            if let Some(u) = self.user {
                owner_refs_admitted_in(st, u, res, &patched, Some(&current))?;
            }
            st.update(
                def,
                ns,
                name,
                patched,
                status_only,
                self.fv,
                false,
                self.now,
            )
        })?;
        Ok(with_warnings(ok(200, &present(&w.obj, res)), &w.warnings))
    }

    fn delete(&self, name: &str) -> Result<Response, ApiErr> {
        let (_, req, res, def, ns) = self.parts();
        let opts: Value = if req.body.is_empty() {
            json!({})
        } else {
            parse_body(req)?
        };
        let (propagation, orphan_false) = delete_options(req, &opts)?;
        let pre = Preconditions {
            uid: opts["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: opts["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
        };
        let done = self.write(|st| st.delete_with(def, ns, name, &pre, propagation, self.now))?;
        // handlers/delete.go: 202 only for a pending delete asked with
        // orphanDependents=false; store.go `finalizeDelete`: a Status
        // unless the store returns the deleted object.
        let code = if !done.gone && orphan_false { 202 } else { 200 };
        if done.gone && !returns_deleted_object(def) {
            let mut details = json!({"name": name, "kind": def.plural});
            if !def.group.is_empty() {
                details["group"] = json!(def.group);
            }
            if let Some(uid) = done.obj["metadata"]["uid"].as_str() {
                details["uid"] = json!(uid);
            }
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details});
            return Ok(ok(code, &status));
        }
        Ok(ok(code, &present(&done.obj, res)))
    }

    /// DELETE on a collection: every object the selectors match.
    fn delete_collection(&self) -> Result<Response, ApiErr> {
        let (_, req, res, def, ns) = self.parts();
        let (l, f) = selectors(req, def)?;
        let deleted = self.write(|st| {
            let victims: Vec<String> = st
                .list(def, res.ns.as_deref())
                .iter()
                .filter(|o| l.matches(o) && f.matches(&def.kind, o))
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            let mut out = Vec::new();
            for v in victims {
                if let Ok(o) = st.delete(def, ns, &v, &Preconditions::default(), self.now) {
                    out.push((*o).clone());
                }
            }
            out
        });
        Ok(ok(
            200,
            &json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(&res.version), "metadata": {}, "items": deleted}),
        ))
    }

    fn parts(&self) -> (&Arc<Shared>, &Request, &Res, &ResourceDef, &str) {
        (self.shared, self.req, self.res, &self.res.def, &self.ns)
    }
}

/// `dryRun`: absent, or `All` (`ValidateDryRun`: any other value is
/// refused, and nothing is written).
fn dry_run(req: &Request) -> Result<bool, ApiErr> {
    match req.q("dryRun") {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(v) => Err(ApiErr::bad_request(format!(
            "Invalid value: []string{{\"{v}\"}}: supported values: \"All\""
        ))),
    }
}

/// The media type of the body, without parameters.
fn content_type(req: &Request) -> String {
    req.header("content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A PATCH body of media type `ct` applied to `current` (strategic merge
/// only for built-in kinds: a 415 for custom resources).
fn apply_patch(ct: &str, current: &Value, body: &Value, custom: bool) -> Result<Value, ApiErr> {
    let invalid = |e: String| ApiErr::new(422, "Invalid", e);
    match ct {
        "application/merge-patch+json" => Ok(patch::merge_patch(current, body)),
        "application/strategic-merge-patch+json" if !custom => {
            patch::strategic_merge(current, body).map_err(invalid)
        }
        "application/json-patch+json" => patch::json_patch(current, body).map_err(invalid),
        _ => Err(ApiErr::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )),
    }
}

/// `ScaleREST` (pkg/registry/apps/deployment/storage/storage.go): `Get`
/// answers the Deployment as a Scale; `Update` (PUT, and PATCH applied to
/// the current Scale) writes the Scale's replicas into the Deployment
/// through the Deployment's own update path (validation, generation, a
/// `resourceVersion` precondition) and answers the Scale it now has.
fn serve_scale(
    shared: &Arc<Shared>,
    req: &Request,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    now: SystemTime,
) -> Result<Response, ApiErr> {
    let method = req.method.as_str();
    if method == "GET" {
        let st = lock(&shared.store);
        let obj = st
            .get(def, ns, name)
            .ok_or_else(|| ApiErr::not_found(def, name))?;
        return Ok(ok(200, &scale::scale_of(&obj)));
    }
    if method != "PUT" && method != "PATCH" {
        return Err(ApiErr::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        ));
    }
    let body = parse_body(req)?;
    let ct = content_type(req);
    let fv = FieldValidation::parse(req.q("fieldValidation"));
    let w = shared.write(|st| {
        let current = st
            .get(def, ns, name)
            .ok_or_else(|| ApiErr::not_found(def, name))?;
        let new_scale = if method == "PUT" {
            scale::check_body(&body, name)?;
            body.clone()
        } else {
            apply_patch(&ct, &scale::scale_of(&current), &body, false)?
        };
        let next = scale::apply(&current, &new_scale, name)?;
        st.update(def, ns, name, next, false, fv, false, now)
    })?;
    Ok(with_warnings(
        ok(200, &scale::scale_of(&w.obj)),
        &w.warnings,
    ))
}

/// Stores built with `ReturnDeletedObject: true` (pods, namespaces,
/// serviceaccounts among the kinds served here); the others answer a delete
/// that took effect with a `Status`.
fn returns_deleted_object(def: &ResourceDef) -> bool {
    !def.custom
        && def.group.is_empty()
        && matches!(def.plural.as_str(), "namespaces" | "serviceaccounts")
}

/// `ValidateDeleteOptions` (apimachinery meta/v1/validation) and the
/// propagation it asks for, from the body or, without one, from the query
/// (handlers/delete.go). Also whether `orphanDependents` is false.
fn delete_options(req: &Request, opts: &Value) -> Result<(Propagation, bool), ApiErr> {
    let (policy, orphan) = if req.body.is_empty() {
        (
            req.q("propagationPolicy").map(|p| json!(p)),
            req.q("orphanDependents").map(|o| json!(o == "true")),
        )
    } else {
        let field = |k: &str| opts.get(k).filter(|v| !v.is_null()).cloned();
        (field("propagationPolicy"), field("orphanDependents"))
    };
    let mut causes = Vec::new();
    if let (Some(p), Some(_)) = (&policy, &orphan) {
        causes.push(Cause::invalid(
            "propagationPolicy",
            p,
            "orphanDependents and deletionPropagation cannot be both set",
        ));
    }
    let propagation = match policy.as_ref().map(|p| p.as_str().unwrap_or("")) {
        None => match orphan.as_ref().and_then(Value::as_bool) {
            Some(true) => Propagation::Orphan,
            Some(false) => Propagation::Background,
            None => Propagation::Default,
        },
        Some("Foreground") => Propagation::Foreground,
        Some("Background") => Propagation::Background,
        Some("Orphan") => Propagation::Orphan,
        Some(_) => {
            causes.push(Cause::not_supported(
                "propagationPolicy",
                policy.as_ref().unwrap_or(&Value::Null),
                &["Foreground", "Background", "Orphan", "nil"],
            ));
            Propagation::Default
        }
    };
    if !causes.is_empty() {
        return Err(ApiErr::invalid_options("DeleteOptions", causes));
    }
    let orphan_false = orphan.and_then(|o| o.as_bool()) == Some(false);
    Ok((propagation, orphan_false))
}

fn sub_is_status(res: &Res) -> Result<bool, ApiErr> {
    match res.sub.as_deref() {
        None => Ok(false),
        Some("status") if res.def.status_subresource => Ok(true),
        Some(other) => Err(ApiErr::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({other})"),
        )),
    }
}

fn render_one(
    req: &Request,
    res: &Res,
    obj: &Value,
    rv: &str,
    now: SystemTime,
) -> Result<Value, ApiErr> {
    Ok(match output_of(req) {
        Output::Json => present(obj, res),
        Output::Partial => partial(obj),
        Output::PartialList => {
            return Err(not_acceptable(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type(&res.def, false)
        )))
        }
        Output::Table => {
            let include = table::Include::of(req.q("includeObject"));
            table::table(&res.def, &res.version, &[obj], rv, now, include)
        }
    })
}

/// A PUT to a missing object of a kind that allows it creates it
/// (genericregistry `Store.Update` with `AllowCreateOnUpdate`). A uid in
/// the body is a precondition no missing object meets: 409.
fn create_on_update(
    st: &mut Store,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    mut body: Value,
    fv: FieldValidation,
    now: SystemTime,
) -> Result<crate::registry::store::WriteResult, ApiErr> {
    if let Some(uid) = body["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
        let why = format!("Precondition failed: UID in precondition: {uid}, UID in object meta: ");
        return Err(ApiErr::conflict(def, name, &why));
    }
    if body["metadata"]["name"].as_str().unwrap_or("").is_empty() {
        body["metadata"]["name"] = json!(name);
    }
    st.create(def, ns, body, fv, now)
}

fn list(shared: &Arc<Shared>, req: &Request, res: &Res) -> Result<Response, ApiErr> {
    let def = &res.def;
    // ValidateListOptions (apimachinery meta/internalversion/validation).
    if req.q("sendInitialEvents").is_some() {
        return Err(ApiErr::invalid_options(
            "ListOptions",
            vec![Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            )],
        ));
    }
    if output_of(req) == Output::Partial {
        return Err(not_acceptable(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type(def, true)
        )));
    }
    let (l, f) = selectors(req, def)?;
    let limit: usize = req
        .q("limit")
        .and_then(|x| x.parse().ok())
        .filter(|x| *x > 0)
        .unwrap_or(usize::MAX);
    let st = lock(&shared.store);
    let ns = res.ns.as_deref();
    // A later page is read at the first page's revision (a snapshot).
    let (list_rv, after, objects) = match req.q("continue").filter(|c| !c.is_empty()) {
        Some(tok) => {
            let (rv, key) = decode_continue(tok)
                .ok_or_else(|| ApiErr::bad_request("continue key is not valid"))?;
            let Some(objects) = st.list_at(def, ns, rv) else {
                return Err(ApiErr::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."));
            };
            (rv, Some(key), objects)
        }
        None => (st.rv, None, st.list(def, ns)),
    };
    drop(st);
    let all: Vec<Arc<Value>> = objects
        .into_iter()
        .filter(|o| l.matches(o) && f.matches(&def.kind, o))
        .filter(|o| match &after {
            Some(k) => obj_key(o) > *k,
            None => true,
        })
        .collect();
    let page: Vec<&Value> = all.iter().take(limit).map(|a| &**a).collect();
    let more = all.len() > page.len();
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if more {
        if let Some(last) = page.last() {
            meta["continue"] = json!(encode_continue(list_rv, &obj_key(last)));
            meta["remainingItemCount"] = json!(all.len() - page.len());
        }
    }
    let now = SystemTime::now();
    let body = match output_of(req) {
        Output::Table => {
            let include = table::Include::of(req.q("includeObject"));
            let rv = list_rv.to_string();
            let mut t = table::table(def, &res.version, &page, &rv, now, include);
            t["metadata"] = meta;
            t
        }
        Output::PartialList => {
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": page.iter().map(|o| partial(o)).collect::<Vec<_>>()})
        }
        Output::Json | Output::Partial => json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(&res.version),
            "metadata": meta,
            "items": page.iter().map(|o| present(o, res)).collect::<Vec<_>>(),
        }),
    };
    Ok(ok(200, &body))
}

/// An object's place in a list: (namespace, name), the store's order.
fn obj_key(o: &Value) -> (String, String) {
    let m = |k: &str| o["metadata"][k].as_str().unwrap_or("").to_string();
    (m("namespace"), m("name"))
}

fn encode_continue(rv: u64, (ns, name): &(String, String)) -> String {
    let key = format!("{ns}/{name}");
    format!(
        "{rv}:{}",
        key.bytes().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

fn decode_continue(tok: &str) -> Option<(u64, (String, String))> {
    let (rv, hex) = tok.split_once(':')?;
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let key = String::from_utf8(bytes?).ok()?;
    let (ns, name) = key.split_once('/')?;
    Some((rv.parse().ok()?, (ns.to_string(), name.to_string())))
}

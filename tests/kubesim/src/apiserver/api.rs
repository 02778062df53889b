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

mod authz;
mod call;
mod list;
pub(crate) use authz::rbac_allows;
use authz::*;
use call::*;
use list::*;

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

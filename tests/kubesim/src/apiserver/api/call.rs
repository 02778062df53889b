//! One request on one resource, carried out: get, create, replace, patch,
//! delete and deletecollection, each through the store's registry
//! strategies, dry run included.

use super::*;

/// One request on a resource, past routing and RBAC: what the handlers of
/// its verbs share.
pub(super) struct Call<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) req: &'a Request,
    pub(super) res: &'a Res,
    /// The request's namespace ("" for cluster-scoped kinds).
    pub(super) ns: String,
    /// The authenticated caller, when RBAC is on.
    pub(super) user: Option<&'a crate::rbac::User>,
    pub(super) fv: FieldValidation,
    /// `dryRun=All`: everything but the commit.
    pub(super) dry: bool,
    pub(super) now: SystemTime,
}

impl Call<'_> {
    /// Run the write on the store, or on a copy for a dry run.
    pub(super) fn write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        if self.dry {
            self.shared.dry_write(f)
        } else {
            self.shared.write(f)
        }
    }

    pub(super) fn get(&self, name: &str) -> Result<Response, ApiErr> {
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

    pub(super) fn create(&self) -> Result<Response, ApiErr> {
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
    pub(super) fn replace(&self, name: &str) -> Result<Response, ApiErr> {
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

    pub(super) fn patch(&self, name: &str) -> Result<Response, ApiErr> {
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

    pub(super) fn delete(&self, name: &str) -> Result<Response, ApiErr> {
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
    pub(super) fn delete_collection(&self) -> Result<Response, ApiErr> {
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

    pub(super) fn parts(&self) -> (&Arc<Shared>, &Request, &Res, &ResourceDef, &str) {
        (self.shared, self.req, self.res, &self.res.def, &self.ns)
    }
}

/// `dryRun`: absent, or `All` (`ValidateDryRun`: any other value is
/// refused, and nothing is written).
pub(super) fn dry_run(req: &Request) -> Result<bool, ApiErr> {
    match req.q("dryRun") {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(v) => Err(ApiErr::bad_request(format!(
            "Invalid value: []string{{\"{v}\"}}: supported values: \"All\""
        ))),
    }
}

/// The media type of the body, without parameters.
pub(super) fn content_type(req: &Request) -> String {
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
pub(super) fn apply_patch(
    ct: &str,
    current: &Value,
    body: &Value,
    custom: bool,
) -> Result<Value, ApiErr> {
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

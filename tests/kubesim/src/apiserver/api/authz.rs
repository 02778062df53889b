//! Who may do what: authentication, RBAC on the request's attributes, and
//! the OwnerReferencesPermissionEnforcement admission plugin
//! (`plugin/pkg/admission/gc`).

use super::*;

/// Who the request is (the authenticator): a user's token names the user
/// (RBAC applies); an admin token, or no token while authentication is
/// off, is allowed everything (None); anything else is refused.
pub(super) fn authenticate(
    shared: &Shared,
    req: &Request,
) -> Result<Option<crate::rbac::User>, ()> {
    let presented = req
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    if let Some(user) = presented.and_then(|p| crate::apiserver::authn::user_for_api(shared, p)) {
        return Ok(Some(user));
    }
    match lock(&shared.tokens).as_ref() {
        None => Ok(None),
        Some(tokens) if presented.is_some_and(|p| tokens.iter().any(|t| t == p)) => Ok(None),
        Some(_) => Err(()),
    }
}

/// The authorizer's view of a resource request.
pub(super) fn attributes(req: &Request, res: &Res) -> crate::rbac::Request {
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

pub(super) fn rbac_allows_in(
    st: &crate::registry::store::Store,
    user: &crate::rbac::User,
    a: &crate::rbac::Request,
) -> bool {
    let all = |plural: &str| -> Vec<std::sync::Arc<Value>> {
        st.registry
            .by_key(&format!("rbac.authorization.k8s.io/{plural}"))
            .map(|def| st.list(def, None))
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
pub(super) fn owner_refs_admitted(
    shared: &Shared,
    user: &crate::rbac::User,
    res: &Res,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiErr> {
    let st = lock(&shared.store);
    owner_refs_admitted_in(&st, user, res, new, old)
}

pub(super) fn owner_refs_admitted_in(
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

pub(super) fn forbidden(user: &crate::rbac::User, a: &crate::rbac::Request) -> Response {
    let mut e = ApiErr::new(403, "Forbidden", crate::rbac::forbidden_message(user, a));
    e.details = json!({"name": a.name, "group": a.api_group, "kind": a.resource});
    err(e)
}

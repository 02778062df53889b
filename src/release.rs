//! `openmed-operator release`: hand a Deployment back by hand when its
//! OpenMedModel went away without the operator's cleanup (its finalizer was
//! removed while the operator was not running). The ConfigMap is then
//! garbage-collected while the Deployment still reads its preload from it,
//! so the next pod restart hangs. This sends the very patch the operator
//! sends on delete ([`patches::deployment_release`]): the owner annotation
//! and claim label removed and, if a container reads the preload from a
//! ConfigMap, that container set to start cold (preload `""`, the
//! empty-manifest hash), so its pods restart cleanly.

use crate::kube::path::DEPLOYMENTS;
use crate::kube::{
    Client, ClientConfig, Endpoint, EndpointOptions, PatchType, ResourcePath, Retry,
};
use crate::model::RESOURCE;
use crate::reconcile::observed::DeploymentView;
use crate::reconcile::patches;

/// What `release` was asked to hand back, and how to reach the API server.
#[derive(Debug, Clone, Default)]
pub struct ReleaseArgs {
    pub endpoint: EndpointOptions,
    pub namespace: String,
    pub name: String,
    /// Release even if the owning OpenMedModel still exists.
    pub force: bool,
}

/// Connects as the operator does (same flags, same in-cluster rules) and
/// releases; the message says what was done.
pub fn run(args: &ReleaseArgs) -> Result<String, String> {
    let endpoint =
        Endpoint::resolve(&args.endpoint, &|k| std::env::var(k).ok()).map_err(|e| e.to_string())?;
    let client = Client::new(endpoint, ClientConfig::default()).map_err(|e| e.to_string())?;
    release(&client, args)
}

pub fn release(client: &Client, args: &ReleaseArgs) -> Result<String, String> {
    let (ns, name) = (&args.namespace, &args.name);
    let path = ResourcePath::object(DEPLOYMENTS, Some(ns), name).map_err(|e| e.to_string())?;
    let raw = client
        .get(&path)
        .map_err(|e| format!("deployment {ns}/{name}: {e}"))?;
    let d = DeploymentView::from_json(&raw)
        .ok_or_else(|| format!("deployment {ns}/{name}: not a Deployment"))?;
    if d.owner.is_none() && !d.claimed {
        return Ok(format!(
            "deployment {ns}/{name} carries no mark of the operator: nothing to do"
        ));
    }
    if let (Some(owner), false) = (&d.owner, args.force) {
        refuse_if_owned(client, owner, ns, name)?;
    }
    let mut patch = patches::deployment_release(&d);
    patch["metadata"]["resourceVersion"] = d.resource_version.clone().into();
    client
        .patch(&path, PatchType::Strategic, &patch, Retry::Write)
        .map_err(|e| format!("deployment {ns}/{name}: {e}"))?;
    Ok(match patches::pointed_container(&d) {
        Some(c) => format!(
            "deployment {ns}/{name} handed back: owner marks removed; container {} starts \
             with no model (preload \"\"), so its pods restart",
            c.name
        ),
        None => format!("deployment {ns}/{name} handed back: owner marks removed"),
    })
}

/// A Deployment whose OpenMedModel still exists (and is not being deleted)
/// is the operator's to hand back: delete the OpenMedModel instead.
fn refuse_if_owned(client: &Client, owner: &str, ns: &str, name: &str) -> Result<(), String> {
    let Some((ons, oname)) = owner.split_once('/') else {
        return Ok(());
    };
    let Ok(path) = ResourcePath::object(RESOURCE, Some(ons), oname) else {
        return Ok(());
    };
    match client.get(&path) {
        Ok(m) if m["metadata"]["deletionTimestamp"].is_null() => Err(format!(
            "OpenMedModel {owner} still exists and owns deployment {ns}/{name}: delete it and \
             the operator hands the Deployment back (or pass --force)"
        )),
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(format!("OpenMedModel {owner}: {e}")),
    }
}

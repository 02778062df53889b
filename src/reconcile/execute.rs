//! Carrying a plan out, in the one order the contract fixes: the writes as
//! listed, then the status (with the generation the Deployment patch
//! returned and the resourceVersion the plan was computed from), then the
//! Events. The shell runs it against the API server; the contract tests run
//! the same function against an in-memory cluster.

use super::observed::ConfigMapView;
use super::patches::StatusPatch;
use super::plan::{EventSpec, Plan, Write};
use serde_json::Value;

/// One call per kind of write. `Err` stops the plan where it is.
pub trait Cluster {
    type Error;
    /// Merge-patch the model's finalizers, conditional on `resource_version`.
    /// `Some(rv)`: the model's new resourceVersion; `None`: the server has
    /// deleted it (its last finalizer went).
    fn set_finalizers(
        &mut self,
        resource_version: &str,
        finalizers: &[String],
    ) -> Result<Option<String>, Self::Error>;
    /// `Some(existing)`: a ConfigMap of that name exists that the caches did
    /// not know; the plan must be made again with it.
    fn create_config_map(&mut self, body: &Value) -> Result<Option<ConfigMapView>, Self::Error>;
    fn patch_config_map(&mut self, name: &str, body: &Value) -> Result<(), Self::Error>;
    /// Strategic merge patch; the Deployment's generation afterwards.
    fn patch_deployment(&mut self, name: &str, body: &Value) -> Result<i64, Self::Error>;
    /// Conditional on the uid.
    fn delete_config_map(&mut self, name: &str, uid: &str) -> Result<(), Self::Error>;
    /// The `/status` merge patch.
    fn patch_status(&mut self, body: &StatusPatch) -> Result<(), Self::Error>;
    /// An Event is posted after the status; a failure fails the plan (the
    /// sync is retried) only after every Event has been tried.
    fn post_event(&mut self, event: &EventSpec) -> Result<(), Self::Error>;
}

/// How carrying a plan out ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Executed {
    /// Every write, the status and the Events are done.
    Done,
    /// A ConfigMap the plan did not know exists: plan again with it.
    Replan(Box<ConfigMapView>),
}

/// Carry `plan` out for a model whose resourceVersion was `resource_version`.
pub fn execute<C: Cluster>(
    cluster: &mut C,
    plan: &Plan,
    resource_version: &str,
) -> Result<Executed, C::Error> {
    let mut rv = resource_version.to_string();
    let mut patched_gen = None;
    let mut gone = false;
    for w in &plan.writes {
        match w {
            Write::AddFinalizer { finalizers } | Write::RemoveFinalizers { finalizers } => {
                match cluster.set_finalizers(&rv, finalizers)? {
                    Some(next) => rv = next,
                    None => gone = true,
                }
            }
            Write::CreateConfigMap { body } => {
                if let Some(found) = cluster.create_config_map(body)? {
                    return Ok(Executed::Replan(Box::new(found)));
                }
            }
            Write::PatchConfigMap { name, body } => cluster.patch_config_map(name, body)?,
            Write::PatchDeployment {
                name,
                body,
                sets_target,
            } => {
                let generation = cluster.patch_deployment(name, body)?;
                if *sets_target {
                    patched_gen = Some(generation);
                }
            }
            Write::DeleteConfigMap { name, uid } => cluster.delete_config_map(name, uid)?,
        }
    }
    if !gone {
        if let Some(body) = plan.status_patch(patched_gen, &rv) {
            cluster.patch_status(&body)?;
        }
    }
    let mut failed = None;
    for e in plan.events_to_post() {
        if let Err(err) = cluster.post_event(e) {
            failed.get_or_insert(err);
        }
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(Executed::Done),
    }
}

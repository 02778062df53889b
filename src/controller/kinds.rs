//! Every watched kind, declared once (§9.5): how it is listed and watched,
//! the view its store keeps, and which models a change wakes. The watches
//! (`Controller::start_watches`) follow from these declarations.

use super::cache::{AutoscalerView, DeploymentMeta, MetaView};
use super::caches::Caches;
use super::index::{LookedUp, TargetIndex};
use super::sync::Reconciler;
use crate::kube::fields::Decode;
use crate::kube::path::{CONFIG_MAPS, DEPLOYMENTS, HORIZONTAL_POD_AUTOSCALERS};
use crate::kube::ResourceType;
use crate::model::{CLAIM_LABEL, MANAGED_BY_LABEL};
use crate::reconcile::observed::ModelObject;
use crate::reconcile::{lookups, ConfigMapView, DeploymentView, ModelView};
use crate::runtime::queue::WorkQueue;
use crate::runtime::reflector::{Label, OnChange};
use crate::runtime::{Change, Item, ObjectKey, StoreWriter, Versioned};
use serde_json::Value;
use std::sync::Arc;

/// How a kind is listed and watched, in each watched namespace.
pub struct Watch {
    /// For logs, metrics and health.
    pub resource: &'static str,
    pub kind: ResourceType,
    pub selector: Option<Label>,
    pub metadata_only: bool,
    /// Narrowed further by `--selector` (the OpenMedModels of this shard).
    pub sharded: bool,
}

/// What a change can wake: the models that look an object up (through the
/// index) go on the queue.
pub struct Wake {
    pub index: Arc<TargetIndex>,
    pub queue: Arc<WorkQueue<ObjectKey>>,
    pub reconciler: Arc<Reconciler>,
}

impl Wake {
    /// Queue the models that look up a `kind` object by this key.
    fn models_of(&self, kind: LookedUp) -> impl Fn(&ObjectKey) + Send + Sync + 'static {
        let (index, queue) = (self.index.clone(), self.queue.clone());
        move |key: &ObjectKey| {
            for m in index.models_for(key.namespace(), kind, key.name()) {
                queue.add(m);
            }
        }
    }
    /// A change to an object of `kind` queues the models that look it up
    /// by its key.
    fn by_lookup<V: 'static>(&self, kind: LookedUp) -> OnChange<V> {
        let w = self.models_of(kind);
        Arc::new(move |c: Change<V>| w(&c.key))
    }
}

/// One watched kind.
pub trait WatchedKind {
    /// What its store keeps of an object.
    type View: Clone + PartialEq + Versioned + Send + Sync + 'static;
    /// What a list or watch decodes.
    type Object: Decode + Item + Send + 'static;
    const WATCH: Watch;
    /// The view an object becomes (None: none to keep).
    fn view(o: Self::Object) -> Option<Self::View>;
    /// Its store's list/watch end.
    fn store(c: &Caches) -> StoreWriter<Self::View>;
    /// What a change of one of its objects wakes.
    fn on_change(wake: &Wake) -> OnChange<Self::View>;
}

/// OpenMedModels: a change updates the index and queues the model.
pub struct Models;

impl WatchedKind for Models {
    type View = ModelView;
    type Object = ModelObject;
    const WATCH: Watch = Watch {
        resource: "openmedmodels",
        kind: crate::model::RESOURCE,
        selector: None,
        metadata_only: false,
        sharded: true,
    };

    fn view(o: ModelObject) -> Option<ModelView> {
        o.view()
    }

    fn store(c: &Caches) -> StoreWriter<ModelView> {
        c.writers().models
    }

    fn on_change(wake: &Wake) -> OnChange<ModelView> {
        let (q, idx) = (wake.queue.clone(), wake.index.clone());
        Arc::new(move |c: Change<ModelView>| {
            // Looked up on a copy: the change shares the store's view,
            // which must stay packed (a parse is kept with the view it was
            // made on, `Parsed`).
            let copy = c.new.as_deref().cloned();
            idx.update(&c.key, copy.as_ref().map(lookups).as_ref());
            q.add(c.key);
        })
    }
}

/// Only ConfigMaps with our managed-by label: a change wakes the models
/// that look them up.
pub struct OurConfigMaps;

impl WatchedKind for OurConfigMaps {
    type View = ConfigMapView;
    type Object = ConfigMapView;
    const WATCH: Watch = Watch {
        resource: "configmaps",
        kind: CONFIG_MAPS,
        selector: Some(Label::Is(MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1)),
        metadata_only: false,
        sharded: false,
    };

    fn view(o: ConfigMapView) -> Option<ConfigMapView> {
        Some(o)
    }

    fn store(c: &Caches) -> StoreWriter<ConfigMapView> {
        c.writers().config_maps
    }

    fn on_change(wake: &Wake) -> OnChange<ConfigMapView> {
        wake.by_lookup(LookedUp::ConfigMap)
    }
}

/// Deployments the operator has claimed, as compact full views: a change
/// wakes the models that look them up.
pub struct ClaimedDeployments;

impl WatchedKind for ClaimedDeployments {
    type View = DeploymentView;
    type Object = DeploymentView;
    const WATCH: Watch = Watch {
        resource: "deployments",
        kind: DEPLOYMENTS,
        selector: Some(Label::Is(CLAIM_LABEL.0, CLAIM_LABEL.1)),
        metadata_only: false,
        sharded: false,
    };

    fn view(o: DeploymentView) -> Option<DeploymentView> {
        Some(o)
    }

    fn store(c: &Caches) -> StoreWriter<DeploymentView> {
        c.writers().deployments
    }

    fn on_change(wake: &Wake) -> OnChange<DeploymentView> {
        wake.by_lookup(LookedUp::Deployment)
    }
}

/// Every Deployment in scope that is not claimed, metadata only: a target
/// appearing, disappearing or changing before it is claimed. Claimed ones
/// are their own watch's (above), so a claimed Deployment's changes are
/// not sent twice: once claimed, it leaves this watch as deleted.
pub struct AllDeployments;

impl WatchedKind for AllDeployments {
    type View = MetaView;
    type Object = DeploymentMeta;
    const WATCH: Watch = Watch {
        resource: "deployments-metadata",
        kind: DEPLOYMENTS,
        selector: Some(Label::IsNot(CLAIM_LABEL.0, CLAIM_LABEL.1)),
        metadata_only: true,
        sharded: false,
    };

    fn view(o: DeploymentMeta) -> Option<MetaView> {
        o.view()
    }

    fn store(c: &Caches) -> StoreWriter<MetaView> {
        c.writers().deployment_meta
    }

    fn on_change(wake: &Wake) -> OnChange<MetaView> {
        let w = wake.models_of(LookedUp::Deployment);
        let reconciler = wake.reconciler.clone();
        Arc::new(move |c: Change<MetaView>| {
            if c.new.is_none() {
                let caches = reconciler.caches();
                caches.forget_fetched(&c.key);
                // Claimed: now the claimed watch's, which wakes for it.
                if caches.claims(&c.key) {
                    return;
                }
            }
            w(&c.key);
        })
    }
}

/// HorizontalPodAutoscalers: a Deployment one scales keeps its replicas.
/// One appearing, going, or changing its target wakes the models of the
/// Deployments it scaled and scales.
pub struct Autoscalers;

impl WatchedKind for Autoscalers {
    type View = AutoscalerView;
    type Object = Value;
    const WATCH: Watch = Watch {
        resource: "horizontalpodautoscalers",
        kind: HORIZONTAL_POD_AUTOSCALERS,
        selector: None,
        metadata_only: false,
        sharded: false,
    };

    fn view(o: Value) -> Option<AutoscalerView> {
        AutoscalerView::from_json(&o)
    }

    fn store(c: &Caches) -> StoreWriter<AutoscalerView> {
        c.writers().autoscalers
    }

    fn on_change(wake: &Wake) -> OnChange<AutoscalerView> {
        let w = wake.models_of(LookedUp::Deployment);
        Arc::new(move |c: Change<AutoscalerView>| {
            let targets = [&c.old, &c.new].into_iter().flatten();
            for d in targets.filter_map(|a| a.deployment.clone()) {
                w(&ObjectKey::new(c.key.namespace(), d));
            }
        })
    }
}

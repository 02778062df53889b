//! The simulated control plane: `deployment` computes what the upstream
//! Deployment and ReplicaSet controllers and the kubelet compute, on pods
//! it keeps itself; `controller` runs it over the store and writes each
//! Deployment's status back; `objects` serves those ReplicaSets and pods as
//! API objects; `serviceaccounts` gives every namespace its `default`
//! ServiceAccount.

pub mod controller;
pub mod deployment;
pub mod objects;
pub mod serviceaccounts;

//! The simulated control plane: `deployment` computes what the upstream
//! Deployment and ReplicaSet controllers and the kubelet compute, on pods
//! that are not API objects; `controller` runs it over the store and writes
//! each Deployment's status back.

pub mod controller;
pub mod deployment;

//! What kube-apiserver's registry and etcd do: the object store, the kinds
//! served (built-ins and CRDs, with their discovery documents), each kind's
//! defaulting and validation strategy, and the Deployment `scale`
//! subresource.

pub mod kinds;
pub mod namespaces;
pub mod resources;
pub mod scale;
pub mod store;

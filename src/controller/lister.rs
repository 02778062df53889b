//! The API client as the runtime's [`ListerWatcher`] (client-go's
//! `NewListWatchFromClient`) and [`LeaseClient`] (its `LeaseLock`): the one
//! place the runtime meets the client.

use crate::kube::fields::Decode;
use crate::kube::{Client, Error, ListParams, ObjectList, ResourcePath, WatchParams, WatchStream};
use crate::runtime::{LeaseClient, ListerWatcher};
use serde_json::Value;
use std::sync::Arc;

/// Lists and watches through the operator's client.
pub struct ApiLister(pub Arc<Client>);

impl ListerWatcher for ApiLister {
    fn list_all_as<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &ListParams,
    ) -> Result<ObjectList<O>, Error> {
        self.0.list_all_as(path, params)
    }

    fn watch_as<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &WatchParams,
    ) -> Result<WatchStream<O>, Error> {
        self.0.watch_as(path, params)
    }
}

/// Reads and writes the Lease through a client of its own.
pub struct ApiLease(pub Client);

impl LeaseClient for ApiLease {
    fn get(&self, path: &ResourcePath) -> Result<Value, Error> {
        self.0.get(path)
    }

    fn create(&self, collection: &ResourcePath, lease: &Value) -> Result<Value, Error> {
        self.0.create(collection, lease)
    }

    fn update(&self, path: &ResourcePath, lease: &Value) -> Result<Value, Error> {
        self.0.update(path, lease)
    }
}

//! Opening a watch (the stream itself is [`crate::kube::watch`]), and the
//! spread of server-side watch timeouts.

use super::list::push_selectors;
use super::request::Method;
use super::{Client, Retry, Verb};
use crate::backoff;
use crate::kube::error::Result;
use crate::kube::fields::Decode;
use crate::kube::path::ResourcePath;
use crate::kube::watch::WatchStream;
use std::time::Duration;

const META_ONE: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: String,
    /// Server-side timeout; the client gives up a little after it.
    pub timeout: Duration,
    pub metadata_only: bool,
}

impl Client {
    /// Open a watch. The server ends it after `params.timeout`; the client
    /// gives up `watch_grace` after that, so a silently dead connection is
    /// noticed.
    pub fn watch(&self, path: &ResourcePath, params: &WatchParams) -> Result<WatchStream> {
        self.watch_as(path, params)
    }

    /// [`Client::watch`], each object decoded as `O`.
    pub fn watch_as<O: Decode>(
        &self,
        path: &ResourcePath,
        params: &WatchParams,
    ) -> Result<WatchStream<O>> {
        let mut req = self.req(Verb::Watch, Method::Get, path, Retry::Never);
        req.query.push(("watch", "1".into()));
        req.query.push(("allowWatchBookmarks", "true".into()));
        if !params.resource_version.is_empty() {
            req.query
                .push(("resourceVersion", params.resource_version.clone()));
        }
        let secs = params.timeout.as_secs().max(1);
        req.query.push(("timeoutSeconds", secs.to_string()));
        push_selectors(
            &mut req.query,
            &params.label_selector,
            &params.field_selector,
        );
        if params.metadata_only {
            req.accept = META_ONE;
        }
        req.timeout = Duration::from_secs(secs) + self.cfg.watch_grace;
        let resp = self.send(&req)?;
        let reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
        let cap = self.cfg.body_limit as usize;
        Ok(WatchStream::of(Box::new(reader), cap, req.shape))
    }
}

/// A random server-side watch timeout between 50 and 60 seconds, so that
/// many watches started together do not all restart together. Short, so a
/// connection that stops delivering without closing (half-open behind NAT,
/// a crashed middlebox) is given up within about a minute (this plus
/// `watch_grace`); a healthy watch is simply reopened at once from its
/// last resourceVersion, which costs the API server little.
pub fn random_watch_timeout() -> Duration {
    Duration::from_secs(50 + backoff::random_u64() % 11)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_timeouts_are_spread() {
        for _ in 0..50 {
            let t = random_watch_timeout();
            assert!(t >= Duration::from_secs(50) && t <= Duration::from_secs(60));
        }
    }
}

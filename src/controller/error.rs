//! The controller's errors, each with the API error (where there is one)
//! as its `source()`.

use crate::kube;
use std::fmt;
use std::time::Duration;

/// Why one sync did not finish; the key is retried with backoff.
#[derive(Debug)]
pub enum SyncError {
    /// The API answered with an error, or did not answer.
    Api(kube::Error),
    /// Every pass met a conflict (another writer keeps winning) or an
    /// unknown ConfigMap, and had to be planned again; the last conflict,
    /// if there was one.
    NotSettled {
        replans: usize,
        last: Option<kube::Error>,
    },
}

impl SyncError {
    fn api(&self) -> Option<&kube::Error> {
        match self {
            SyncError::Api(e) => Some(e),
            SyncError::NotSettled { last, .. } => last.as_ref(),
        }
    }

    /// A wait the server asked for (`Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.api().and_then(kube::Error::retry_after)
    }

    /// The `kind` label of `reconcile_errors_total`.
    pub fn kind_label(&self) -> String {
        match self {
            SyncError::Api(e) => e.kind_label(),
            SyncError::NotSettled { .. } => "not_settled".into(),
        }
    }
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Api(e) => write!(f, "{e}"),
            SyncError::NotSettled { replans, last } => {
                write!(f, "planned {replans} times without settling")?;
                match last {
                    Some(e) => write!(f, "; last conflict: {e}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.api().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<kube::Error> for SyncError {
    fn from(e: kube::Error) -> SyncError {
        SyncError::Api(e)
    }
}

/// Why the operator could not start.
#[derive(Debug)]
pub enum StartError {
    /// The API endpoint, its credentials or a path are unusable.
    Endpoint(kube::Error),
    /// The health and metrics server could not listen.
    Listen(String),
    /// A watch or worker thread could not be started.
    Thread(std::io::Error),
    /// `--leader-elect` without a namespace for the Lease.
    NoLeaseNamespace,
    /// No usable certificate for /metrics.
    Certificate(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Endpoint(e) => write!(f, "{e}"),
            StartError::Listen(why) => write!(f, "{why}"),
            StartError::Certificate(why) => write!(f, "metrics certificate: {why}"),
            StartError::Thread(e) => write!(f, "cannot start a thread: {e}"),
            StartError::NoLeaseNamespace => write!(
                f,
                "--leader-elect: no namespace for the Lease (--lease-namespace, POD_NAMESPACE or a service account)"
            ),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Endpoint(e) => Some(e),
            StartError::Thread(e) => Some(e),
            StartError::Listen(_) | StartError::Certificate(_) | StartError::NoLeaseNamespace => {
                None
            }
        }
    }
}

impl From<kube::Error> for StartError {
    fn from(e: kube::Error) -> StartError {
        StartError::Endpoint(e)
    }
}

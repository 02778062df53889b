//! Status vocabulary (phases, conditions, reasons, event reasons), rendered
//! in one place, and the status document the reconcile plan edits.

mod owed;
mod record;

pub use owed::OwedEvent;
pub use record::{each_that_reads, spec_of, BeforeRejection, Condition, ModelStatus, Snapshot};

macro_rules! vocabulary {
    ($(#[$m:meta])* $name:ident { $($variant:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),* }
            }
            pub fn parse(s: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                d.deserialize_str(Named($name::parse, stringify!($name)))
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// A visitor reading one word of a vocabulary (no copy of the text).
struct Named<T>(fn(&str) -> Option<T>, &'static str);

impl<T> serde::de::Visitor<'_> for Named<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a {}", self.1)
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
        (self.0)(s).ok_or_else(|| E::custom(format_args!("no {} {s:?}", self.1)))
    }
}

vocabulary!(
    /// `status.phase`.
    Phase { Pending, RollingOut, Ready, Failed, RolledBack }
);

/// Declares the conditions once (§5.2): each one's type, in the order
/// they are written, and its field in a [`PerCondition`]. A condition added
/// here is a compile error in every state and every set of messages that
/// does not say what it is.
macro_rules! conditions {
    ($($variant:ident $field:ident),* $(,)?) => {
        vocabulary!(
            /// The conditions, in the order they are written.
            ConditionType { $($variant),* }
        );

        /// One `T` for each condition, by its type.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct PerCondition<T> {
            $(pub $field: T),*
        }

        impl<T> PerCondition<T> {
            /// Each condition's `T` with its type, in the written order.
            pub fn into_each(self) -> impl Iterator<Item = (ConditionType, T)> {
                [$((ConditionType::$variant, self.$field)),*].into_iter()
            }

            /// The same `T` for every condition.
            pub fn all(t: impl Into<T>) -> PerCondition<T>
            where
                T: Clone,
            {
                let t = t.into();
                PerCondition { $($field: t.clone()),* }
            }

            /// Each condition's `T` made a `U`.
            pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerCondition<U> {
                PerCondition { $($field: f(self.$field)),* }
            }

            /// Each condition's `T` beside its `U`.
            pub fn zip<U>(self, other: PerCondition<U>) -> PerCondition<(T, U)> {
                PerCondition { $($field: (self.$field, other.$field)),* }
            }
        }
    };
}

conditions! {
    Ready ready,
    Progressing progressing,
    Degraded degraded,
    RolledBack rolled_back,
}

vocabulary!(
    /// Every condition reason the operator writes.
    Reason {
        InvalidSpec, Blocked, NotRequested, TargetNotFound, ContainerNotFound, TargetConflict,
        ConfigMapConflict, RollbackTargetUnavailable, RollbackRejected, ManualRollback,
        RollbackInProgress, RolledBack, RolloutFailed, ProgressDeadlineExceeded, RollbackDisabled,
        RolloutSucceeded, RolloutComplete, Healthy, RolloutInProgress, DeploymentProgressing,
        RollbackFailed, RollbackComplete, DesiredVersionFailed, RollbackSucceeded, RolloutStarted,
        SpecChanged, InitialRollout, DriftCorrected, TargetPaused, TargetPatchRejected,
        ConfigMapRejected, TargetRecreated, TargetDegraded, TargetNotOptedIn,
    }
);

vocabulary!(
    /// Every Event reason the operator posts.
    EventReason {
        TargetNotFound, ContainerNotFound, TargetConflict, ConfigMapConflict, RollbackRejected,
        RollbackStarted, RolloutStarted, RolloutFailed, RolloutSucceeded, RollbackFailed,
        RollbackSucceeded, ModelRemoved, ModelRemovalSkipped, TargetPatchRejected,
        ConfigMapRejected, TargetReleased, TargetAdopted, TargetDegraded, TargetNotOptedIn,
        InvalidSpec,
    }
);

impl EventReason {
    /// Warning or Normal, fixed per reason.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventReason::TargetNotFound
                | EventReason::ContainerNotFound
                | EventReason::TargetConflict
                | EventReason::ConfigMapConflict
                | EventReason::RollbackRejected
                | EventReason::RolloutFailed
                | EventReason::RollbackFailed
                | EventReason::ModelRemovalSkipped
                | EventReason::TargetPatchRejected
                | EventReason::ConfigMapRejected
                | EventReason::TargetDegraded
                | EventReason::TargetNotOptedIn
                | EventReason::InvalidSpec
        )
    }
}

vocabulary!(
    /// A condition's status: True, False, or Unknown (a judgement the
    /// operator cannot make yet, such as a rollout on a paused Deployment).
    CondStatus { True, False, Unknown }
);

impl From<bool> for CondStatus {
    fn from(b: bool) -> CondStatus {
        if b {
            CondStatus::True
        } else {
            CondStatus::False
        }
    }
}

/// One condition as the plan wants it; lastTransitionTime is decided on merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub status: CondStatus,
    pub reason: Reason,
    pub message: String,
}

/// The message is bounded and escaped (§9.15): it may quote a user.
pub fn cond(status: impl Into<CondStatus>, reason: Reason, message: impl Into<String>) -> Cond {
    Cond {
        status: status.into(),
        reason,
        message: crate::foreign::bounded(message.into(), MAX_MESSAGE),
    }
}

/// A state's conditions without their messages: (status, reason) for each.
/// Each state is named once, in [`states`], and used by the core and the
/// tests alike.
pub type CondSet = PerCondition<(CondStatus, Reason)>;

/// A state's messages, one for each condition, named so that no two can be
/// swapped unnoticed. `Messages { rolled_back, ..Messages::all(m) }` varies
/// one of a state that one cause explains.
pub type Messages = PerCondition<String>;

/// The conditions a pass wants written.
pub type Conds = PerCondition<Cond>;

impl CondSet {
    /// The conditions with the pass's messages.
    pub fn with(self, messages: Messages) -> Conds {
        self.zip(messages).map(|((s, r), m)| cond(s, r, m))
    }

    /// `T:RolloutSucceeded`-style labels, as the tests spell a state.
    pub fn labels(self) -> Vec<String> {
        self.into_each()
            .map(|(_, (s, r))| format!("{}:{r}", &s.as_str()[..1]))
            .collect()
    }
}

/// Every state the operator reports (docs/contract.md §6.14).
pub mod states {
    use super::CondSet;
    use super::CondStatus::{False as F, True as T, Unknown as U};
    use super::Reason::{self, *};

    pub const INVALID_SPEC: CondSet = CondSet {
        ready: (F, InvalidSpec),
        progressing: (F, Blocked),
        degraded: (T, InvalidSpec),
        rolled_back: (F, NotRequested),
    };
    /// An environmental block (§6.2-§6.4, 9.2, 9.19) of this reason.
    pub const fn blocked(r: Reason) -> CondSet {
        CondSet {
            ready: (F, r),
            progressing: (F, Blocked),
            degraded: (T, r),
            rolled_back: (F, NotRequested),
        }
    }
    pub const ROLLBACK_REJECTED: CondSet = CondSet {
        ready: (F, RollbackTargetUnavailable),
        progressing: (F, Blocked),
        degraded: (T, RollbackTargetUnavailable),
        rolled_back: (F, RollbackRejected),
    };
    /// A rollout started for this reason (SpecChanged, InitialRollout, ...).
    pub const fn started(r: Reason) -> CondSet {
        CondSet {
            ready: (F, RolloutStarted),
            progressing: (T, r),
            degraded: (F, Healthy),
            rolled_back: (F, NotRequested),
        }
    }
    pub const ROLLING_OUT: CondSet = CondSet {
        ready: (F, RolloutInProgress),
        progressing: (T, DeploymentProgressing),
        degraded: (F, Healthy),
        rolled_back: (F, NotRequested),
    };
    /// Rolling out on a paused Deployment (9.20).
    pub const ROLLING_OUT_PAUSED: CondSet = CondSet {
        ready: (F, RolloutInProgress),
        progressing: (U, TargetPaused),
        degraded: (F, Healthy),
        rolled_back: (F, NotRequested),
    };
    pub const READY: CondSet = CondSet {
        ready: (T, RolloutSucceeded),
        progressing: (F, RolloutComplete),
        degraded: (F, Healthy),
        rolled_back: (F, NotRequested),
    };
    pub const FAILED_NO_ROLLBACK: CondSet = CondSet {
        ready: (F, RolloutFailed),
        progressing: (F, ProgressDeadlineExceeded),
        degraded: (T, RolloutFailed),
        rolled_back: (F, RollbackDisabled),
    };
    pub const AUTOMATIC_ROLLBACK_STARTED: CondSet = CondSet {
        ready: (F, RolledBack),
        progressing: (T, RollbackInProgress),
        degraded: (T, RolloutFailed),
        rolled_back: (F, RollbackInProgress),
    };
    pub const MANUAL_ROLLBACK_STARTED: CondSet = CondSet {
        ready: (F, ManualRollback),
        progressing: (T, RollbackInProgress),
        degraded: (T, ManualRollback),
        rolled_back: (F, RollbackInProgress),
    };
    /// A rollback under way: by hand or after a failure; paused or not.
    pub const fn rolling_back(manual: bool, paused: bool) -> CondSet {
        let progressing = if paused {
            (U, TargetPaused)
        } else {
            (T, RollbackInProgress)
        };
        CondSet {
            ready: (F, RolledBack),
            progressing,
            degraded: degraded(manual),
            rolled_back: (F, RollbackInProgress),
        }
    }
    /// A rollback that serves: by hand (9.22) or after a failure.
    pub const fn rolled_back(manual: bool) -> CondSet {
        CondSet {
            ready: (F, RolledBack),
            progressing: (F, RollbackComplete),
            degraded: degraded(manual),
            rolled_back: (T, RollbackSucceeded),
        }
    }
    const fn degraded(manual: bool) -> (super::CondStatus, Reason) {
        if manual {
            (T, ManualRollback)
        } else {
            (T, DesiredVersionFailed)
        }
    }
    pub const ROLLBACK_FAILED: CondSet = CondSet {
        ready: (F, RollbackFailed),
        progressing: (F, ProgressDeadlineExceeded),
        degraded: (T, RollbackFailed),
        rolled_back: (F, RollbackFailed),
    };
    /// The Deployment fails with no rollout of ours (9.21); a rollback that
    /// had served still says so.
    pub const fn target_degraded(after_rollback: bool) -> CondSet {
        let rolled_back = if after_rollback {
            (T, RollbackSucceeded)
        } else {
            (F, NotRequested)
        };
        CondSet {
            ready: (F, TargetDegraded),
            progressing: (F, TargetDegraded),
            degraded: (T, TargetDegraded),
            rolled_back,
        }
    }
}

/// The longest message copied into status or an Event (docs/contract.md §9.15).
pub const MAX_MESSAGE: usize = 1024;
/// The longest `rollback-to` target kept (§9.15): longer than any valid
/// version, so a cut one is still rejected, and never copied whole.
pub const MAX_ROLLBACK_TARGET: usize = 256;

#[cfg(test)]
mod tests;

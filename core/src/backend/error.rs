//! The portable error vocabulary (`docs/errors.md#codes`).
//!
//! Every backend maps its driver's errors into this one enum at a single
//! chokepoint, so callers (the runtime's settle policy, the HTTP layer)
//! branch on meaning, never on a driver type.

use crate::model::{GroupName, StreamName, ValidationError};

/// What can go wrong in a backend call. Exhaustive on purpose: the
/// server maps every variant to an HTTP answer, and a new one must get one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The stream does not exist (checked before the group).
    #[error("stream {:?} not found", .0.as_str())]
    StreamNotFound(StreamName),
    /// The stream exists; the group does not.
    #[error("group {:?} not found on stream {:?}", group.as_str(), stream.as_str())]
    GroupNotFound {
        /// The stream.
        stream: StreamName,
        /// The missing group.
        group: GroupName,
    },
    /// A stream or group of that name exists already.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The lease was superseded (re-claimed, settled, replayed or reset).
    #[error("stale lease: the delivery is no longer held by this lease")]
    StaleLease,
    /// A settle or renew of a lease whose event the stream's retention
    /// removed (`docs/log.md#retention`): nothing is left to settle.
    #[error(
        "event {0:?} is no longer in the stream: its retention removed it (or it never was there)"
    )]
    EventRemoved(String),
    /// The lease id matches but the backend-native receipt does not.
    #[error("receipt mismatch: the receipt does not match the current claim")]
    ReceiptMismatch,
    /// A dead-letter page cursor names an event the stream does not have.
    #[error("cursor {0:?} not found")]
    CursorNotFound(String),
    /// A reset or a delete needs `confirm: true`.
    #[error("this deletes state for good and needs confirm: true")]
    ConfirmRequired,
    /// A partition outside `0..partition_count`.
    #[error("partition {partition} does not exist (the stream has {partition_count})")]
    InvalidPartition {
        /// The partition asked for.
        partition: u32,
        /// How many the stream has.
        partition_count: u32,
    },
    /// `partition_count` outside the allowed range.
    #[error("partition_count must be between 1 and {max} (got {got})")]
    InvalidPartitionCount {
        /// What was asked for.
        got: u32,
        /// The maximum.
        max: u32,
    },
    /// Replay needs exactly one of its selectors.
    #[error("invalid replay options: {0}")]
    InvalidReplayOpts(String),
    /// Bad input, naming the field and the rule.
    #[error("invalid {0}")]
    Invalid(ValidationError),
    /// The backend cannot be reached; nothing was done (or it is unknown
    /// for a write, see [`Error::Ambiguous`]).
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    /// A write may or may not have been applied.
    #[error("ambiguous outcome: {0}")]
    Ambiguous(String),
    /// The store has no space left for the write (a full disk); nothing
    /// was applied. The same call may succeed once space is freed.
    #[error("storage full: {0}")]
    StorageFull(String),
    /// A definite failure; nothing was applied.
    #[error("backend failed: {0}")]
    Failed(String),
}

impl Error {
    /// The stable, machine-readable code (`stale_lease`, …), listed in
    /// `docs/errors.md#codes`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::StreamNotFound(_) => "stream_not_found",
            Error::GroupNotFound { .. } => "group_not_found",
            Error::AlreadyExists(_) => "already_exists",
            Error::StaleLease => "stale_lease",
            Error::ReceiptMismatch => "receipt_mismatch",
            Error::EventRemoved(_) => "event_removed",
            Error::CursorNotFound(_) => "cursor_not_found",
            Error::ConfirmRequired => "confirm_required",
            Error::InvalidPartition { .. } => "invalid_partition",
            Error::InvalidPartitionCount { .. } => "invalid_partition_count",
            Error::InvalidReplayOpts(_) => "invalid_replay_opts",
            Error::Invalid(_) => "invalid",
            Error::BackendUnavailable(_) => "backend_unavailable",
            Error::Ambiguous(_) => "ambiguous",
            Error::StorageFull(_) => "storage_full",
            Error::Failed(_) => "failed",
        }
    }

    /// True for errors where retrying the same call later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::BackendUnavailable(_) | Error::Ambiguous(_))
    }

    /// Shorthand for an [`Error::Invalid`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid(ValidationError::new(field, message))
    }
}

impl From<ValidationError> for Error {
    fn from(e: ValidationError) -> Self {
        Error::Invalid(e)
    }
}

impl From<crate::model::PartitionOutOfRange> for Error {
    fn from(e: crate::model::PartitionOutOfRange) -> Self {
        Error::InvalidPartition {
            partition: e.partition,
            partition_count: e.partition_count,
        }
    }
}

/// Results of backend calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

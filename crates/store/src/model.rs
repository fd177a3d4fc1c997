//! The domain model: what a [`Store`](crate::Store) keeps.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Admission, Counters, ExitReason, Lease, OwnerId};

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// Mints a fresh UUID v7 id (time-ordered, so ids sort by creation).
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Wraps an existing UUID, e.g. one read back from a database.
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The underlying UUID.
            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Self {
                id.0
            }
        }
    };
}

pub(crate) use id_newtype;

id_newtype!(
    /// Identifies an [`Incident`].
    IncidentId
);
id_newtype!(
    /// Identifies a [`Session`]. Minted by the session layer before the row exists.
    SessionId
);
id_newtype!(
    /// Identifies an [`Artifact`]. Minted before upload, because the blob key embeds it.
    ArtifactId
);
/// Error returned when a stored enum value has no Rust counterpart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} value {value:?}")]
#[non_exhaustive]
pub struct ParseEnumError {
    /// Which enum was being parsed, e.g. `"session status"`.
    pub what: &'static str,
    /// The value that did not parse.
    pub value: String,
}

macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable text form used in databases and on the wire.
            pub const fn as_str(&self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ParseEnumError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(ParseEnumError { what: $what, value: s.to_owned() }),
                }
            }
        }
    };
}

string_enum!(
    /// Whether an incident still accepts new sessions.
    IncidentStatus, "incident status" {
        /// New sessions may be created.
        Open => "open",
        /// No new sessions; existing ones are untouched.
        Closed => "closed",
    }
);

string_enum!(
    /// Lifecycle status of a session. There is no "pending": a row is born `Running`.
    SessionStatus, "session status" {
        /// The agent is running, or waiting for the user.
        Running => "running",
        /// The run ended normally.
        Completed => "completed",
        /// The run ended with an error (including panics and timeouts).
        Failed => "failed",
        /// The run was cancelled.
        Cancelled => "cancelled",
    }
);

impl SessionStatus {
    /// `true` for `Completed`, `Failed` and `Cancelled`: statuses that carry an `ended_at`.
    pub const fn is_terminal(&self) -> bool {
        !matches!(self, SessionStatus::Running)
    }

    /// The terminal statuses, for backends that filter on them.
    pub const TERMINAL: &'static [SessionStatus] = &[
        SessionStatus::Completed,
        SessionStatus::Failed,
        SessionStatus::Cancelled,
    ];
}

string_enum!(
    /// Whether a session is the first in its incident.
    SessionKind, "session kind" {
        /// The first session of an incident.
        Initial => "initial",
        /// Any later session of the same incident.
        FollowUp => "follow_up",
    }
);

impl SessionKind {
    /// The kind of the session numbered `seq` in its incident (1: initial);
    /// stores decide it in the insert that assigns the seq.
    pub fn for_seq(seq: u32) -> Self {
        [SessionKind::Initial, SessionKind::FollowUp][usize::from(seq > 1)]
    }
}

string_enum!(
    /// What an artifact holds.
    ArtifactKind, "artifact kind" {
        /// The authored `report.md` of a revision.
        Report => "report",
        /// Any other file the agent left behind.
        AgentOutput => "agent_output",
        /// The whole scratch directory as one `workspace.tar.gz`.
        WorkspaceArchive => "workspace_archive",
        /// A file a user uploaded into the incident.
        Upload => "upload",
        /// A real agent's own state kept with a revision (the thread it
        /// resumes from on reopen): harvested, restored and swept like any
        /// artifact, never served to users.
        AgentState => "agent_state",
        /// A file of the running revision stored mid-run, at the run's
        /// fence, so a lost replica loses at most one checkpoint interval.
        /// Superseded by the next checkpoint of its path and promoted to an
        /// `agent_output` or `report` row when the run lands
        /// ([`Store::replace_checkpoints`](crate::Store::replace_checkpoints));
        /// never served to users, never restored by a reopen (left out of
        /// [`Store::latest_session_artifacts`](crate::Store::latest_session_artifacts)),
        /// never context.
        Checkpoint => "checkpoint",
    }
);

/// A repository pinned at a commit: where a session's read-only trees come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorkspaceRef {
    /// Repository location (a path or URL understood by the seeder).
    pub repo: String,
    /// The pinned commit (a full or abbreviated object id, or any revision git accepts).
    pub commit: String,
}

/// An incident: the container sessions run in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    /// Store-minted UUID v7.
    pub id: IncidentId,
    /// Human title.
    pub title: String,
    /// Open or closed.
    pub status: IncidentStatus,
    /// The pinned repository its sessions run at, if any.
    pub workspace: Option<WorkspaceRef>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
}

/// What it takes to create an incident. The store mints the id and sets the status to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIncident {
    /// Human title; must not be blank.
    pub title: String,
    /// Optional pinned repository.
    pub workspace: Option<WorkspaceRef>,
}

/// A session row.
///
/// Invariant kept by every store: `ended_at.is_some() == status.is_terminal()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Caller-minted UUID v7.
    pub id: SessionId,
    /// The incident it belongs to.
    pub incident_id: IncidentId,
    /// 1-based position inside the incident, allocated by the store.
    pub seq: u32,
    /// Initial or follow-up.
    pub kind: SessionKind,
    /// Current status.
    pub status: SessionStatus,
    /// The prompt of the first run.
    pub prompt: String,
    /// The pinned repository of this session, if any.
    pub workspace_ref: Option<WorkspaceRef>,
    /// Why the last run ended (free text, e.g. `completed`, `panicked`).
    pub exit_reason: Option<ExitReason>,
    /// Usage of the last run.
    pub counters: Counters,
    /// Iteration number: 1 after create, incremented by every reopen.
    pub revision: u32,
    /// The fence of the current run: 1 after create, incremented by every
    /// transition that starts a new run of the session (reopen, resume of
    /// an idle session) and by every transition that ends a run on its
    /// behalf without starting one (a takeover, an operator's forced
    /// cancel). Every write of a run — settlement, report row, artifact
    /// rows — presents it ([`Settlement::fence`](crate::Settlement::fence)):
    /// a run whose fence is older was superseded and may write nothing, and
    /// a run at the current fence may write only while the row is active
    /// ([`Session::is_active`]).
    pub fence: u64,
    /// A cancel of the current run was requested
    /// ([`Coordination::request_cancel`](crate::Coordination::request_cancel)). A request
    /// names the fence it targets: it never reaches a later run of the
    /// session.
    pub cancel_requested: bool,
    /// The manager incarnation that runs (or claimed) the session's
    /// current run, while it is active (`None` once it is terminal or
    /// idle, and while it is queued: created or continued without a
    /// [`Lease`]).
    pub owner: Option<OwnerId>,
    /// When the session's lease expires unless it is renewed, by the
    /// store's clock (`None` exactly when `owner` is): its own claim's
    /// expiry, or its owner's lease when that is later and the owner
    /// holds it (see [`Coordination::heartbeat`](crate::Coordination::heartbeat)).
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the session reached its current terminal status; `None` while running.
    pub ended_at: Option<DateTime<Utc>>,
    /// When the current revision's run started — its manager recorded
    /// that it calls the runner
    /// ([`Coordination::mark_started`](crate::Coordination::mark_started)),
    /// after claiming it. `None` while the revision is queued or claimed
    /// and not yet started; every continue (reopen, answer) clears it for
    /// the new revision. Rows older than admission carry their creation
    /// time.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    /// The attempt of the current revision's run: 1 for its first; every
    /// [`release_for_resume`](crate::Coordination::release_for_resume)
    /// counts the next before it can start. A continue (reopen, answer)
    /// starts the new revision at 1.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The current revision's run lost its owner and waits, as a queued
    /// row does, for a manager of its pool to resume it
    /// ([`claim_next`](crate::Coordination::claim_next)); nobody owns it
    /// meanwhile, it keeps `started_at`, and it is never an orphan.
    #[serde(default)]
    pub resume_pending: bool,
    /// While a resume is pending: the earliest time it may be claimed (the
    /// backoff between attempts), by the store's clock.
    #[serde(default)]
    pub resume_after: Option<DateTime<Utc>>,
    /// Pool, priority, queue key and idempotency key, fixed at create.
    #[serde(default)]
    pub admission: Admission,
    /// What runs the session, as its creator described it
    /// ([`NewSession::runner`]); opaque to korvus and not served over
    /// HTTP. `None` for rows written before it was recorded.
    #[serde(skip)]
    pub runner: Option<String>,
}

/// [`Session::attempt`] of rows written before attempts were counted.
fn first_attempt() -> u32 {
    1
}

/// What it takes to create a session.
///
/// Deliberately has no `seq` and no `status`: the store allocates the seq inside its
/// own transaction and every session is born `running`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// Caller-minted id (UUID v7).
    pub id: SessionId,
    /// The incident; must exist. The store numbers the session in it
    /// (`seq`) and decides its [`SessionKind`] from that number.
    pub incident_id: IncidentId,
    /// The prompt.
    pub prompt: String,
    /// The pinned repository, if any.
    pub workspace_ref: Option<WorkspaceRef>,
    /// The owner of the first run and its lease: the creator claims the
    /// run. `None` queues it (see [`Session::is_queued`]): a manager of
    /// its pool claims it later.
    pub lease: Option<Lease>,
    /// Pool, priority, queue key, idempotency key.
    pub admission: Admission,
    /// What runs the session, as its creator describes it — the CLI
    /// records its agent options here, so `reopen` and `reply` need none.
    /// Opaque to korvus, at most [`MAX_RUNNER_BYTES`](crate::validate::MAX_RUNNER_BYTES),
    /// stored in the clear: never a secret or an environment value.
    pub runner: Option<String>,
}

/// A stored file: bytes live in blob storage at `blob_key`, this row describes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Caller-minted UUID v7 (embedded in the blob key).
    pub id: ArtifactId,
    /// The incident.
    pub incident_id: IncidentId,
    /// The session that produced it.
    pub session_id: SessionId,
    /// What it is.
    pub kind: ArtifactKind,
    /// Workspace-relative path, `/`-separated.
    pub path: String,
    /// Where the bytes are.
    pub blob_key: String,
    /// MIME type.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Lower-case hex SHA-256 of the bytes.
    pub sha256: String,
    /// Report revision of the iteration that produced it.
    pub revision: u32,
    /// The fence of the run that wrote it ([`Session::fence`]).
    pub fence: u64,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
}

/// What it takes to create an artifact row (upload the bytes first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewArtifact {
    /// Caller-minted id.
    pub id: ArtifactId,
    /// The incident; must be the session's.
    pub incident_id: IncidentId,
    /// The producing session.
    pub session_id: SessionId,
    /// What it is.
    pub kind: ArtifactKind,
    /// Workspace-relative path.
    pub path: String,
    /// Where the bytes already are.
    pub blob_key: String,
    /// MIME type.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Lower-case hex SHA-256.
    pub sha256: String,
    /// Report revision.
    pub revision: u32,
    /// The fence of the writing run: the batch is written only while every
    /// row's session is at its fence.
    pub fence: u64,
}

impl NewArtifact {
    /// The row a store returns after inserting this request at `created_at`.
    /// One definition for every backend.
    pub fn stored_at(self, created_at: DateTime<Utc>) -> Artifact {
        Artifact {
            id: self.id,
            incident_id: self.incident_id,
            session_id: self.session_id,
            kind: self.kind,
            path: self.path,
            blob_key: self.blob_key,
            content_type: self.content_type,
            size_bytes: self.size_bytes,
            sha256: self.sha256,
            revision: self.revision,
            fence: self.fence,
            created_at,
        }
    }
}

/// A request to hand an artifact to a session as context.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContextRef {
    /// The inherited artifact; must belong to the session's incident.
    pub artifact_id: ArtifactId,
    /// Free-text role, e.g. `input` or `prior_report`.
    pub role: String,
}

/// A stored context ref, in the order it was requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionContextRef {
    /// The receiving session.
    pub session_id: SessionId,
    /// The incident of both session and artifact.
    pub incident_id: IncidentId,
    /// The inherited artifact.
    pub artifact_id: ArtifactId,
    /// Role as requested.
    pub role: String,
    /// 0-based position: stored order equals request order.
    pub position: u32,
}

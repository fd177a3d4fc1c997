//! A [`Runner`] for tests whose behaviour is a closure: [`ScriptRunner`],
//! and what such a runner's script does most ([`write_files`],
//! [`log_turn`]), plus [`unique_sleep`] for agents a test must find by
//! name. Behind the `testing` feature, so the session layer's tests, the
//! command runner's, the end-to-end tests and an embedder's own tests
//! share one copy.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use korvus_log::{Event, EventKind};

use crate::{RunContext, RunError, RunOutcome, Runner};

type Script = Arc<
    dyn Fn(RunContext, Option<String>) -> BoxFuture<'static, Result<RunOutcome, RunError>>
        + Send
        + Sync,
>;

/// A context a [`ScriptRunner`] got, with the reopen message if any.
pub type Seen = (RunContext, Option<String>);

/// A runner whose behaviour is a closure of the run's context and, on
/// resume, the user's message; it records every context it got.
///
/// ```
/// use korvus_runner::testing::ScriptRunner;
/// use korvus_runner::RunOutcome;
/// use korvus_store::Counters;
///
/// let runner = ScriptRunner::new(|_ctx, _message| async move {
///     Ok(RunOutcome::completed(Counters::default()))
/// });
/// assert!(runner.seen.lock().unwrap().is_empty());
/// ```
#[derive(Clone)]
pub struct ScriptRunner {
    script: Script,
    /// Every context the runner got, in order (shared by clones).
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl fmt::Debug for ScriptRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptRunner").finish_non_exhaustive()
    }
}

impl ScriptRunner {
    /// A runner that runs `script` for `run` (message `None`) and `resume`.
    pub fn new<F, Fut>(script: F) -> Self
    where
        F: Fn(RunContext, Option<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<RunOutcome, RunError>> + Send + 'static,
    {
        Self {
            script: Arc::new(move |ctx, msg| Box::pin(script(ctx, msg))),
            seen: Arc::default(),
        }
    }
}

#[async_trait]
impl Runner for ScriptRunner {
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((ctx.clone(), None));
        (self.script)(ctx, None).await
    }

    async fn resume(&self, ctx: RunContext, message: String) -> Result<RunOutcome, RunError> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((ctx.clone(), Some(message.clone())));
        (self.script)(ctx, Some(message)).await
    }
}

/// Writes each `(path, text)` of `files` into the run's scratch dir,
/// creating parent directories: what a test agent leaves behind.
///
/// # Panics
/// When the run has no scratch dir or a write fails — a test helper.
pub fn write_files(ctx: &RunContext, files: &[(&str, &str)]) {
    let dir = ctx.scratch.as_ref().expect("the run has a scratch dir");
    for (path, body) in files {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("parent directories created");
        }
        std::fs::write(p, body).expect("file written");
    }
}

/// Appends one complete turn to the run's log: its start, a note and its
/// end.
///
/// # Panics
/// When the append fails — a test helper.
pub async fn log_turn(ctx: &RunContext, turn: u64) {
    ctx.log
        .append(&[
            Event::new(EventKind::TurnStart { turn }),
            Event::new(EventKind::Note {
                text: format!("working on turn {turn}"),
            }),
            Event::new(EventKind::TurnEnd {
                turn,
                interrupted: false,
            }),
        ])
        .await
        .expect("turn appended");
}

/// A `sleep` argument no other test uses (this process's id and the
/// clock's nanoseconds after 1000 s), so `pgrep -f "^sleep <it>"` finds
/// only the agent of the test that made it.
pub fn unique_sleep() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("1000.{}{:09}", std::process::id(), nanos)
}

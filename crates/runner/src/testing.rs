//! A [`Runner`] for tests whose behaviour is a closure: [`ScriptRunner`].
//! Behind the `testing` feature, so the session layer's tests, the
//! end-to-end tests and an embedder's own tests share one.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;

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

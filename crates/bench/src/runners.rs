//! Runners the benchmarks drive the manager with.

use std::sync::Arc;

use async_trait::async_trait;
use korvus_runner::{RunContext, RunError, RunOutcome, Runner};
use korvus_store::Counters;
use tokio::sync::Barrier;

/// Writes `files` files of `size` bytes into the scratch dir (the first is
/// `report.md`) and returns completed.
#[derive(Debug)]
pub(crate) struct FilesRunner {
    pub(crate) files: usize,
    pub(crate) size: usize,
}

#[async_trait]
impl Runner for FilesRunner {
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        let dir = ctx
            .scratch
            .ok_or_else(|| RunError::msg("the benchmark needs a scratch dir"))?;
        for i in 0..self.files {
            let name = if i == 0 {
                korvus_workspace::REPORT_FILE.to_owned()
            } else {
                format!("out-{i:03}.txt")
            };
            let bytes = vec![b'a' + (i % 26) as u8; self.size];
            tokio::fs::write(dir.join(name), bytes)
                .await
                .map_err(|e| RunError::msg(format!("writing a file: {e}")))?;
        }
        Ok(RunOutcome::completed(Counters::default()))
    }

    async fn resume(&self, ctx: RunContext, _message: String) -> Result<RunOutcome, RunError> {
        self.run(ctx).await
    }
}

/// Waits on a barrier (when given), then until the run is cancelled.
#[derive(Debug)]
pub(crate) struct ParkedRunner {
    pub(crate) barrier: Option<Arc<Barrier>>,
}

#[async_trait]
impl Runner for ParkedRunner {
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        if let Some(barrier) = &self.barrier {
            barrier.wait().await;
        }
        ctx.cancel.cancelled().await;
        Ok(RunOutcome::completed(Counters::default()))
    }

    async fn resume(&self, ctx: RunContext, _message: String) -> Result<RunOutcome, RunError> {
        self.run(ctx).await
    }
}

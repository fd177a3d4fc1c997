//! Preparing one iteration's scratch dir: create it, seed the read-only
//! trees, read the skills, write the inherited context and (on reopen)
//! restore the session's own earlier output; and pinning docs search.
//!
//! Every step but creating the directory degrades: a failure is logged and
//! the run goes on with less.

use std::collections::BTreeMap;

use korvus_runner::{DocsLease, InheritedFile};
use korvus_store::Artifact;
use korvus_workspace::{RestoredFile, ScratchDir, SeedOutcome, SkillCatalog, WorkspacePath};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::manager::Inner;
use crate::supervise::{Plan, Resume};

/// The scratch dir of one iteration and what was put into it.
pub(crate) struct Prepared {
    pub(crate) dir: Option<ScratchDir>,
    pub(crate) inherited: Vec<InheritedFile>,
    pub(crate) skills: SkillCatalog,
    pub(crate) restored: BTreeMap<WorkspacePath, RestoredFile>,
}

impl Inner {
    /// Prepares the scratch dir, or nothing when no scratch root is set.
    ///
    /// Filling the directory (seeding, context, restore) obeys `token`: a
    /// hanging seeder must not keep `stop` waiting. A cancelled preparation
    /// still returns the directory, so the run lands (a report row for the
    /// revision) and the clean-up removes it — a later reopen gets a fresh
    /// one.
    ///
    /// # Errors
    /// Only when the directory itself cannot be created (the session then
    /// settles `workspace_failed`).
    pub(crate) async fn prepare(
        &self,
        plan: &Plan,
        token: &CancellationToken,
    ) -> Result<Prepared, String> {
        let mut prepared = Prepared {
            dir: None,
            inherited: plan
                .inherited
                .iter()
                .map(|(a, role)| InheritedFile {
                    artifact: a.clone(),
                    role: role.clone(),
                    path: None,
                })
                .collect(),
            skills: SkillCatalog::default(),
            restored: BTreeMap::new(),
        };
        let Some(root) = &self.scratch else {
            info!("no scratch root configured; running without a workspace");
            return Ok(prepared);
        };
        let dir = korvus_workspace::create(root, plan.session.id)
            .await
            .map_err(|e| format!("scratch dir not created: {e}"))?;
        tokio::select! {
            () = self.fill(&dir, plan, &mut prepared) => {}
            () = token.cancelled() => {
                info!("cancelled while preparing the workspace");
            }
        }
        prepared.dir = Some(dir);
        Ok(prepared)
    }

    /// Seeds, writes the context and restores own output into `dir`.
    async fn fill(&self, dir: &ScratchDir, plan: &Plan, prepared: &mut Prepared) {
        prepared.skills = self.seed(dir, plan).await;
        if self.blobs.is_some() {
            self.write_context(dir, plan, &mut prepared.inherited).await;
            if let Some(resume) = &plan.resume {
                prepared.restored = self.restore(dir, resume).await;
            }
        }
    }

    /// Seeds the read-only trees; returns the skills found in them (none
    /// when the session was pinned but not seeded).
    async fn seed(&self, dir: &ScratchDir, plan: &Plan) -> SkillCatalog {
        let Some(seeder) = &self.seeder else {
            info!("no seeder configured; seeding skipped");
            return SkillCatalog::default();
        };
        let seeding = seeder.seed(dir, plan.session.workspace_ref.as_ref()).await;
        match &seeding {
            Ok(SeedOutcome::Skipped(reason)) => info!(%reason, "seeding skipped"),
            Ok(_) => info!("workspace seeded"),
            Err(e) => {
                warn!(error = %e, "seeding failed; the session runs without seeded trees or skills")
            }
        }
        SkillCatalog::after_seeding(dir.path(), seeding.as_ref())
            .await
            .unwrap_or_else(|e| {
                warn!(error = %e, "skills not loaded");
                SkillCatalog::default()
            })
    }

    /// Writes the inherited artifacts at `context/<n>-<name>` and records
    /// where each landed.
    async fn write_context(&self, dir: &ScratchDir, plan: &Plan, inherited: &mut [InheritedFile]) {
        let Some(blobs) = &self.blobs else { return };
        let artifacts: Vec<Artifact> = plan.inherited.iter().map(|(a, _)| a.clone()).collect();
        let outcome = korvus_workspace::materialize_context(
            dir,
            plan.session.incident_id,
            &artifacts,
            &**blobs,
        )
        .await;
        match outcome {
            Ok(outcome) => {
                for f in &outcome.failed {
                    warn!(failure = ?f, "context file left out");
                }
                for written in outcome.written {
                    if let Some(i) = inherited
                        .iter_mut()
                        .find(|i| i.artifact.id == written.artifact)
                    {
                        i.path = Some(written.path);
                    }
                }
            }
            Err(e) => warn!(error = %e, "context not materialised"),
        }
    }

    /// Brings the session's own earlier output back (reopen).
    async fn restore(
        &self,
        dir: &ScratchDir,
        resume: &Resume,
    ) -> BTreeMap<WorkspacePath, RestoredFile> {
        let Some(blobs) = &self.blobs else {
            return BTreeMap::new();
        };
        let outcome =
            korvus_workspace::restore_own_output(dir, &resume.own, &self.read_only, &**blobs).await;
        for f in &outcome.failed {
            warn!(failure = ?f, "own output not restored");
        }
        for r in &outcome.refused {
            warn!(refused = ?r, "own output refused");
        }
        outcome.restored
    }
}

/// Pins docs search at the session's commit when both are configured; a
/// failure or a cancellation while pinning means a run without docs.
pub(crate) async fn pin_docs(
    inner: &Inner,
    plan: &Plan,
    token: &CancellationToken,
) -> Option<DocsLease> {
    let (Some(docs), Some(pin)) = (&inner.docs, &plan.session.workspace_ref) else {
        return None;
    };
    if token.is_cancelled() {
        return None;
    }
    tokio::select! {
        pinned = docs.pin(pin) => match pinned {
            Ok(lease) => Some(lease),
            Err(e) => {
                warn!(error = %e, "docs search not available for this run");
                None
            }
        },
        _ = token.cancelled() => None,
    }
}

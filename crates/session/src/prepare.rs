//! Preparing one iteration's scratch dir: create it, seed the read-only
//! trees, read the skills, write the inherited context and (on reopen)
//! restore the session's own earlier output; and pinning docs search.
//!
//! Every step but creating the directory degrades: a failure is logged and
//! the run goes on with less.

use std::collections::BTreeMap;

use korvus_runner::{DocsLease, InheritedFile};
use korvus_store::Artifact;
use korvus_workspace::{
    LoadSkills, RestoredFile, ScratchDir, SeedOutcome, SkillCatalog, WorkspacePath, REPORT_FILE,
    REPORT_TEMPLATE,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::inner::Inner;
use crate::run::{Plan, Resume, Run};

/// The scratch dir of one iteration and what was put into it.
pub(crate) struct Prepared {
    pub(crate) dir: Option<ScratchDir>,
    pub(crate) inherited: Vec<InheritedFile>,
    pub(crate) skills: SkillCatalog,
    pub(crate) restored: BTreeMap<WorkspacePath, RestoredFile>,
    /// Where the report template was copied, if it was.
    pub(crate) report_template: Option<WorkspacePath>,
    /// The restored `report.md` as it was before the runner started, so
    /// landing can tell whether this iteration wrote it.
    pub(crate) restored_report: Option<FileStamp>,
}

/// What identifies one version of a file on disk: a rewrite — even of the
/// same text — changes the modification time, a replacement the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    inode: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    /// The stamp of the file at `path`, if it is a regular file.
    pub(crate) async fn of(path: &std::path::Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = tokio::fs::symlink_metadata(path).await.ok()?;
        meta.is_file().then(|| Self {
            inode: meta.ino(),
            modified: meta.modified().ok(),
        })
    }
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
            report_template: None,
            restored_report: None,
        };
        let Some(root) = &self.scratch else {
            info!("no scratch root configured; running without a workspace");
            return Ok(prepared);
        };
        // One directory per iteration: a leftover of an earlier one never
        // blocks this one.
        let (session, revision) = (plan.key().session, plan.key().revision);
        let dir = match korvus_workspace::create_iteration(root, session, revision).await {
            // A superseded run of this revision left it on this host: one
            // whose claim went back to the queue, or one taken over. This
            // run holds the session's current fence, so that run can write
            // nothing more; its recorded agents are stopped and its dir
            // removed before this run makes its own.
            Err(korvus_workspace::WorkspaceError::AlreadyExists { path }) => {
                warn!(dir = %path.display(), "a superseded run of this revision left its scratch dir; removing it");
                let reaped = korvus_workspace::reap_session_through(root, session, revision)
                    .await
                    .map_err(|e| format!("scratch dir not created: {e}"))?;
                if let Some((path, e)) = reaped.failed.first() {
                    return Err(format!("scratch dir not created: {} not removed: {e}", path.display()));
                }
                korvus_workspace::create_iteration(root, session, revision).await
            }
            made => made,
        }
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
        prepared.report_template = self.copy_template(dir).await;
        prepared.skills = self.seed(dir, plan).await;
        if self.blobs.is_some() {
            self.write_context(dir, plan, &mut prepared.inherited).await;
            if let Some(resume) = &plan.resume {
                prepared.restored = self.restore(dir, resume).await;
                // Only an earlier revision's report: one a resumed
                // attempt's checkpoint brought back is this revision's.
                let earlier = prepared.restored.keys().any(|p| p.as_str() == REPORT_FILE);
                if earlier {
                    prepared.restored_report = FileStamp::of(&dir.path().join(REPORT_FILE)).await;
                }
            }
        }
    }

    /// Copies the report template read-only into the scratch dir, under the
    /// metadata dir, so the harvest never stores it as the agent's output.
    async fn copy_template(&self, dir: &ScratchDir) -> Option<WorkspacePath> {
        let source = self.config.report_template.as_ref()?;
        let target = dir.path().join(REPORT_TEMPLATE);
        let copied = async {
            if let Some(parent) = target.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            tokio::fs::copy(source, &target).await?;
            let mut perms = tokio::fs::metadata(&target).await?.permissions();
            perms.set_readonly(true);
            tokio::fs::set_permissions(&target, perms).await
        };
        match copied.await {
            Ok(()) => WorkspacePath::new(REPORT_TEMPLATE).ok(),
            Err(e) => {
                warn!(error = %e, template = %source.display(), "report template not copied; the run goes on without it");
                None
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
        let seeding = seeder
            .seed(dir, plan.session().workspace_ref.as_ref())
            .await;
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
        let outcome =
            korvus_workspace::materialize_context(dir, plan.key().incident, &artifacts, &**blobs)
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
        let mut restored = outcome.restored;
        if !resume.checkpoint.is_empty() {
            // Output of this revision: written over the earlier output, and
            // not remembered as restored, so its landing stores it.
            let lost = korvus_workspace::restore_own_output(
                dir,
                &resume.checkpoint,
                &self.read_only,
                &**blobs,
            )
            .await;
            for f in &lost.failed {
                warn!(failure = ?f, "the lost attempt's checkpoint not restored");
            }
            for path in lost.restored.keys() {
                restored.remove(path);
            }
        }
        restored
    }
}

impl Run<'_> {
    /// Pins docs search at the session's commit when both are configured; a
    /// failure or a cancellation while pinning means a run without docs.
    pub(crate) async fn pin_docs(&self, plan: &Plan) -> Option<DocsLease> {
        let token = &self.token;
        let (Some(docs), Some(pin)) = (&self.inner.docs, &plan.session().workspace_ref) else {
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
}

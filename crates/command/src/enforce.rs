//! Putting a run's [`Limits`] in force: its cgroup made before the
//! program starts, the note a run gets where they are not (all) in force,
//! and the note of what it used at most.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use korvus_runner::RunContext;
use tracing::warn;

use crate::cgroup::{self, Peaks, Placement, RunCgroup};
use crate::limits::Limits;
use crate::CommandError;

/// The run's cgroup and the note its limits need, if any; an error
/// when the limits are required but not (all) in force.
pub(crate) async fn place(
    limits: &Limits,
    ctx: &RunContext,
) -> Result<(Option<Arc<RunCgroup>>, Option<String>), CommandError> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "run-{}-r{}-{}",
        ctx.session.id,
        ctx.revision,
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let policy = limits.clone();
    let placement = tokio::task::spawn_blocking(move || cgroup::place(&policy, &name))
        .await
        .unwrap_or_else(|e| Placement::NotInForce(format!("placing the run failed: {e}")));
    let required = limits.required;
    match placement {
        Placement::NotNeeded => Ok((None, None)),
        Placement::InForce { cgroup, gaps } if gaps.is_empty() => {
            Ok((Some(Arc::new(cgroup)), None))
        }
        Placement::InForce { gaps, .. } if required => Err(CommandError::Limits {
            reason: gaps.join("; "),
        }),
        Placement::InForce { cgroup, gaps } => Ok((
            Some(Arc::new(cgroup)),
            Some(format!("limits partly in force: {}", gaps.join("; "))),
        )),
        Placement::NotInForce(reason) if required => Err(CommandError::Limits { reason }),
        Placement::NotInForce(reason) => {
            announce_unlimited(&reason);
            Ok((
                None,
                Some(format!(
                    "limits not in force ({reason}): the agent ran without memory, task \
                     or CPU limits"
                )),
            ))
        }
    }
}

static UNLIMITED_ANNOUNCED: AtomicBool = AtomicBool::new(false);

/// Warns once per process that agents run without cgroup limits.
fn announce_unlimited(why: &str) {
    if !UNLIMITED_ANNOUNCED.swap(true, Ordering::Relaxed) {
        warn!(
            reason = why,
            "agents run WITHOUT memory, task or CPU limits (said once per process; every \
             run's log says it too)"
        );
    }
}

/// What the run used at most, against its limits, where the kernel keeps
/// it.
pub(crate) fn peaks_note(peaks: Peaks, limits: &Limits) -> Option<String> {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1 << 20));
    let of = |limit: Option<String>| limit.map_or_else(String::new, |l| format!(" of {l}"));
    let mut parts = Vec::new();
    if let Some(memory) = peaks.memory {
        parts.push(format!(
            "memory peak {}{}",
            mib(memory),
            of(limits.memory.map(mib))
        ));
    }
    if let Some(tasks) = peaks.tasks {
        parts.push(format!(
            "tasks peak {tasks}{}",
            of(limits.tasks.map(|t| t.to_string()))
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

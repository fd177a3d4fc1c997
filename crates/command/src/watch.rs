//! Watching a run against its [`Limits`] while it runs: the cgroup's
//! out-of-memory kills, the scratch dir's allocated size, and the stall
//! clock (no output line and no CPU time used). Also the processes of the
//! agent's session, for runs without a cgroup.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cgroup::RunCgroup;
use crate::limits::Limits;

/// A limit the run went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hit {
    /// The kernel killed a process of the run for memory.
    Memory,
    /// The scratch dir grew past its limit.
    Disk,
    /// No output and no CPU time for the stall limit.
    Stall,
}

/// CPU time that counts as work when less than 1% of a core was used:
/// 10 ms, one clock tick of `/proc/<pid>/stat`.
const MIN_BUSY_MICROS: u64 = 10_000;

/// Microseconds per clock tick of `/proc/<pid>/stat` (`USER_HZ`, 100 on
/// Linux).
const MICROS_PER_TICK: u64 = 10_000;

/// The checks of one run, every [`Limits::poll`].
#[derive(Debug)]
pub(crate) struct Watch {
    scratch: PathBuf,
    scratch_limit: Option<u64>,
    stall: Option<Duration>,
    pub(crate) poll: Duration,
    /// The agent's session id (its leader's pid).
    sid: i32,
    last_activity: Instant,
    /// CPU time (microseconds) of the run's processes at the last poll.
    last_cpu: Option<u64>,
    /// CPU time used since the last sign of life, summed poll by poll (a
    /// total that falls — a process left or its source changed — adds
    /// nothing, and does not hide later work).
    busy_since: u64,
    /// When the scratch dir is walked next: a walk that took `d` waits at
    /// least `10 × d`, so a huge tree costs at most a tenth of a core.
    next_walk: Instant,
    /// The scratch dir's allocated size at the last walk.
    last_size: u64,
    /// When the stall and CPU checks run next (every `poll`; the scratch
    /// walk and the memory check may run more often).
    next_stall: Instant,
}

/// How often the scratch dir is walked while it grows: a fast writer is
/// stopped within about this long of passing its limit.
const GROWING_WALK: Duration = Duration::from_millis(250);

/// How often it is walked at most while it does not grow.
const STEADY_WALK: Duration = Duration::from_secs(1);

impl Watch {
    pub(crate) fn new(limits: &Limits, scratch: &Path, sid: i32) -> Self {
        Self {
            scratch: scratch.to_path_buf(),
            scratch_limit: limits.scratch,
            stall: limits.stall,
            poll: limits.poll,
            sid,
            last_activity: Instant::now(),
            last_cpu: None,
            busy_since: 0,
            next_walk: Instant::now(),
            last_size: 0,
            next_stall: Instant::now(),
        }
    }

    /// How often [`check`](Self::check) is called: `poll`, or more often
    /// when there is a scratch limit (the walk then sets its own pace).
    pub(crate) fn tick(&self) -> Duration {
        match self.scratch_limit {
            Some(_) => self.poll.min(GROWING_WALK),
            None => self.poll,
        }
    }

    /// Whether there is anything to check without a cgroup.
    pub(crate) fn has_checks(&self) -> bool {
        self.scratch_limit.is_some() || self.stall.is_some()
    }

    /// The agent printed something.
    pub(crate) fn activity(&mut self) {
        self.last_activity = Instant::now();
        self.busy_since = 0;
    }

    /// One round of checks; the first limit the run is past, if any.
    pub(crate) async fn check(&mut self, cgroup: Option<&RunCgroup>) -> Option<Hit> {
        if cgroup.is_some_and(|c| c.oom_kills() > 0) {
            return Some(Hit::Memory);
        }
        if let Some(limit) = self
            .scratch_limit
            .filter(|_| Instant::now() >= self.next_walk)
        {
            let dir = self.scratch.clone();
            let started = Instant::now();
            let size = tokio::task::spawn_blocking(move || allocated(&dir))
                .await
                .unwrap_or(0);
            // While it grows, walked again soon; a walk that took `d` waits
            // at least `10 × d` whatever the pace.
            let pace = if size > self.last_size {
                GROWING_WALK
            } else {
                STEADY_WALK.min(self.poll)
            };
            self.last_size = size;
            self.next_walk = Instant::now() + (started.elapsed() * 10).max(pace);
            if size > limit {
                tracing::warn!(size, limit, "scratch dir past its limit; stopping the run");
                return Some(Hit::Disk);
            }
        }
        let stall = self.stall?;
        if Instant::now() < self.next_stall {
            return None;
        }
        self.next_stall = Instant::now() + self.poll;
        let cpu = match cgroup.and_then(RunCgroup::cpu_usage) {
            Some(used) => Some(u64::try_from(used.as_micros()).unwrap_or(u64::MAX)),
            None => {
                let sid = self.sid;
                // A fresh shared scan answers without a blocking thread.
                match recent_scan() {
                    Some(scan) => Some(scan.get(&sid).copied().unwrap_or(0)),
                    None => tokio::task::spawn_blocking(move || session_cpu(sid))
                        .await
                        .ok(),
                }
                .map(|ticks| ticks.saturating_mul(MICROS_PER_TICK))
            }
        };
        // Work, not wake-ups: an idle program's timers use a few
        // microseconds now and then, which must not keep a stalled run
        // alive. At least 1% of a core since the last activity counts.
        if let (Some(now), Some(before)) = (cpu, self.last_cpu) {
            self.busy_since = self.busy_since.saturating_add(now.saturating_sub(before));
        }
        let first = self.last_cpu.is_none() && cpu.is_some();
        self.last_cpu = cpu;
        if first || busy_enough(self.busy_since, self.last_activity.elapsed()) {
            self.activity();
        }
        (self.last_activity.elapsed() >= stall).then_some(Hit::Stall)
    }
}

/// Whether `busy` microseconds of CPU over `idle` are work: more than 1% of
/// a core, and at least [`MIN_BUSY_MICROS`].
fn busy_enough(busy: u64, idle: Duration) -> bool {
    let idle = u64::try_from(idle.as_micros()).unwrap_or(u64::MAX);
    busy > (idle / 100).max(MIN_BUSY_MICROS)
}

/// The bytes allocated beneath `dir` (blocks, not apparent sizes; each
/// hard-linked file once; symlinks not followed).
pub(crate) fn allocated(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.nlink() > 1 && !meta.is_dir() && !linked.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    total
}

/// The processes of session `sid`, from `/proc`.
pub(crate) fn session_members(sid: i32) -> Vec<i32> {
    proc_stats()
        .filter(|s| s.session == sid)
        .map(|s| s.pid)
        .collect()
}

/// CPU time (in clock ticks) used by session `sid`'s processes and the
/// children they reaped.
fn session_cpu(sid: i32) -> u64 {
    cpu_by_session().get(&sid).copied().unwrap_or(0)
}

/// How old a scan of `/proc` may be and still answer a run's check.
const SHARED_SCAN_AGE: Duration = Duration::from_millis(100);

/// The last scan of `/proc` and when it was taken.
type Scan = Option<(Instant, Arc<HashMap<i32, u64>>)>;
static LAST_SCAN: Mutex<Scan> = Mutex::new(None);

/// The last scan, when it is younger than [`SHARED_SCAN_AGE`]. Quick:
/// callable on a runtime worker.
fn recent_scan() -> Option<Arc<HashMap<i32, u64>>> {
    let last = LAST_SCAN.lock().unwrap_or_else(|p| p.into_inner());
    last.as_ref()
        .filter(|(at, _)| at.elapsed() < SHARED_SCAN_AGE)
        .map(|(_, scan)| Arc::clone(scan))
}

/// CPU ticks of every process session on the host, from one scan of
/// `/proc` shared by every run of this process for [`SHARED_SCAN_AGE`].
/// A scan reads every process's `stat`, so one per run per poll would
/// cost runs × processes reads; shared, a thousand runs polling every 2 s
/// cost at most ten scans a second. While one run scans, the others take
/// the last scan rather than wait (a waiting check would hold a blocking
/// thread); only the very first waits. Blocking.
fn cpu_by_session() -> Arc<HashMap<i32, u64>> {
    static SCANNING: Mutex<()> = Mutex::new(());
    let last = || LAST_SCAN.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(scan) = recent_scan() {
        return scan;
    }
    let _scanning = match SCANNING.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::WouldBlock) => match last() {
            Some((_, scan)) => return scan,
            None => SCANNING.lock().unwrap_or_else(|p| p.into_inner()),
        },
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
    };
    // Another run may have scanned while this one waited for the lock.
    if let Some(scan) = recent_scan() {
        return scan;
    }
    let mut by_session = HashMap::new();
    for s in proc_stats() {
        *by_session.entry(s.session).or_insert(0) += s.ticks;
    }
    let scan = Arc::new(by_session);
    *LAST_SCAN.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((Instant::now(), Arc::clone(&scan)));
    scan
}

struct ProcStat {
    pid: i32,
    session: i32,
    ticks: u64,
}

fn proc_stats() -> impl Iterator<Item = ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(e.path().join("stat")).ok()?;
            parse_stat(pid, &text)
        })
}

/// Fields of `/proc/<pid>/stat` after the command name (which may hold
/// spaces and parentheses, so the last `)` ends it): session is the 4th,
/// utime, stime, cutime and cstime the 12th to 15th.
fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let session = fields.get(3)?.parse().ok()?;
    let ticks = fields
        .get(11..15)?
        .iter()
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Some(ProcStat {
        pid,
        session,
        ticks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_are_not_work_and_a_falling_total_hides_nothing() {
        let idle = Duration::from_secs(10);
        // 5 ms in 10 s: wake-ups.
        assert!(!busy_enough(5_000, idle));
        // 200 ms in 10 s: 2% of a core.
        assert!(busy_enough(200_000, idle));
        // Output resets what was counted.
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits::default().stall(Some(Duration::from_secs(60)));
        let mut w = Watch::new(&limits, dir.path(), 0);
        w.busy_since = 250_000;
        w.activity();
        assert_eq!(w.busy_since, 0);
    }

    #[test]
    fn a_stat_line_with_a_strange_name_parses() {
        let line = "42 (a b) c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5 0 0";
        let s = parse_stat(42, line).expect("parsed");
        assert_eq!((s.pid, s.session, s.ticks), (42, 42, 13));
    }

    #[test]
    fn allocated_counts_blocks_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(dir.path().join("a"), dir.path().join("b")).unwrap();
        let size = allocated(dir.path());
        assert!((1 << 20..2 << 20).contains(&size), "{size}");
    }

    #[test]
    fn this_process_is_in_its_session() {
        // Read from /proc, not getsid(2): in a container whose session
        // leader is outside its pid namespace the id is 0.
        let me = i32::try_from(std::process::id()).unwrap();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let sid = parse_stat(me, &stat).unwrap().session;
        assert!(session_members(sid).contains(&me));
    }
}

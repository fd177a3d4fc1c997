//! Records of the agent processes a run started, so a process that died
//! without stopping them (SIGKILL, OOM) leaves a way to find them: a runner
//! writes `<session dir>/<revision>.agent` — beside the iteration's scratch
//! dir, outside what the agent may write — and [`reap`](crate::reap) stops
//! the recorded process group before it removes the session's dir.
//!
//! A record holds the group id (the leader's pid) and the leader's start
//! time (`/proc/<pid>/stat`, in clock ticks since boot). A group is only
//! signalled when its leader still has that start time, or when the leader
//! is gone (a pid stays allocated while any process uses it as a group id,
//! so the id cannot name another group then).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The extension of agent records in a session's dir.
pub(crate) const RECORD_EXTENSION: &str = "agent";

/// Where the run whose scratch dir is `scratch` (`<root>/<session>/<revision>`)
/// records its agent: `<root>/<session>/<revision>.agent`. `None` for a
/// path without a parent or a name.
pub fn agent_record_path(scratch: &Path) -> Option<PathBuf> {
    let name = scratch.file_name()?;
    let mut file = name.to_os_string();
    file.push(".");
    file.push(RECORD_EXTENSION);
    Some(scratch.parent()?.join(file))
}

/// Records that the run of `scratch` started the process group `pgid`.
///
/// # Errors
/// The I/O error of writing the record, or of reading the leader's start
/// time (the process is gone already).
pub fn record_agent(scratch: &Path, pgid: i32) -> io::Result<()> {
    let path = agent_record_path(scratch).ok_or_else(|| io::Error::other("no session dir"))?;
    let started = start_time(pgid).ok_or_else(|| io::Error::other("no such process"))?;
    fs::write(path, format!("{pgid} {started}\n"))
}

/// Removes the record of the run of `scratch` (its agent was stopped).
/// A missing record is fine.
///
/// # Errors
/// Any I/O error but `NotFound`.
pub fn forget_agent(scratch: &Path) -> io::Result<()> {
    let Some(path) = agent_record_path(scratch) else {
        return Ok(());
    };
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Stops (`SIGKILL`) every process group recorded in `session_dir` — or
/// beside it, by a run whose scratch dir was the session's dir itself —
/// whose leader is still the recorded process or is gone, and returns the
/// group ids signalled. Records that do not parse are skipped; the sibling
/// record is removed with the session's dir.
pub fn stop_recorded_agents(session_dir: &Path) -> Vec<i32> {
    let mut records: Vec<PathBuf> = fs::read_dir(session_dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(RECORD_EXTENSION))
                .collect()
        })
        .unwrap_or_default();
    let sibling = agent_record_path(session_dir);
    records.extend(sibling.clone());
    let stopped = records.iter().filter_map(|r| stop_record(r)).collect();
    if let Some(sibling) = sibling {
        let _ = fs::remove_file(sibling);
    }
    stopped
}

/// Stops (`SIGKILL`) the agent process group the run of `scratch`
/// recorded ([`record_agent`]), if its leader is still the recorded
/// process or is gone, and removes the record: one run's, where
/// [`stop_recorded_agents`] stops every run's of a session. Returns the
/// group signalled.
pub fn stop_recorded_agent(scratch: &Path) -> Option<i32> {
    let record = agent_record_path(scratch)?;
    let stopped = stop_record(&record);
    let _ = fs::remove_file(record);
    stopped
}

/// Stops the group `record` names, if it is still that group.
pub(crate) fn stop_record(record: &Path) -> Option<i32> {
    let (pgid, started) = parse(&fs::read_to_string(record).ok()?)?;
    let same = match start_time(pgid) {
        Some(now) => now == started,
        // The leader is gone; its id still names only its group.
        None => true,
    };
    let group = rustix::process::Pid::from_raw(pgid)?;
    (same && rustix::process::kill_process_group(group, rustix::process::Signal::KILL).is_ok())
        .then_some(pgid)
}

fn parse(text: &str) -> Option<(i32, u64)> {
    let mut fields = text.split_whitespace();
    let pgid: i32 = fields.next()?.parse().ok()?;
    let started: u64 = fields.next()?.parse().ok()?;
    (pgid > 1).then_some((pgid, started))
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, after
/// the parenthesised command name, which may itself hold spaces).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_sits_beside_the_scratch_dir() {
        assert_eq!(
            agent_record_path(Path::new("/r/s/3")),
            Some(PathBuf::from("/r/s/3.agent"))
        );
        assert_eq!(agent_record_path(Path::new("/")), None);
    }

    #[test]
    fn records_parse_or_are_skipped() {
        assert_eq!(parse("1234 5678\n"), Some((1234, 5678)));
        for bad in ["", "1234", "x 1", "1 5", "-5 1", "0 1"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_process_has_a_start_time() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(start_time(me).is_some());
        assert_eq!(start_time(i32::MAX), None);
    }
}

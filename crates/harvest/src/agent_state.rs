//! A real agent's kept state: the files a command runner left in
//! [`AGENT_STATE_DIR`] for a reopen to resume the agent's thread, harvested
//! as `agent_state` artifacts beside the walk (which skips the hidden dir).

use std::path::Path;

use korvus_workspace::{WorkspacePath, AGENT_STATE_DIR};

use crate::walk::Candidate;

/// The files a command runner kept in
/// [`AGENT_STATE_DIR`](korvus_workspace::AGENT_STATE_DIR) (a real agent's
/// thread, for a reopen): regular files directly in it, at most
/// [`MAX_AGENT_STATE_FILES`]. The walk skips the dir (it is hidden); these
/// are stored as `agent_state` artifacts, outside the file cap.
pub(crate) fn agent_state_candidates(scratch: &Path) -> Vec<Candidate> {
    let Ok(entries) = std::fs::read_dir(scratch.join(AGENT_STATE_DIR)) else {
        return Vec::new();
    };
    let mut found: Vec<Candidate> = entries
        .flatten()
        .filter_map(|entry| {
            let meta = entry.metadata().ok().filter(|m| m.is_file())?;
            let name = entry.file_name().into_string().ok()?;
            let path = WorkspacePath::new(format!("{AGENT_STATE_DIR}/{name}")).ok()?;
            let stat = crate::stat::FileStat::of(&meta);
            Some(Candidate {
                path,
                size: stat.size,
                stat: Some(stat),
            })
        })
        .collect();
    found.sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
    found.truncate(MAX_AGENT_STATE_FILES);
    found
}

/// The most files of [`agent_state_candidates`].
pub(crate) const MAX_AGENT_STATE_FILES: usize = 4;

/// Whether a harvested path is a real agent's kept state.
pub(crate) fn is_agent_state(path: &str) -> bool {
    path.strip_prefix(AGENT_STATE_DIR)
        .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_of_the_state_dir_only() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(AGENT_STATE_DIR);
        std::fs::create_dir_all(state.join("sub")).unwrap();
        std::fs::write(state.join("state.json"), "{}").unwrap();
        std::fs::write(state.join("sub/deeper.json"), "{}").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", state.join("link.json")).unwrap();
        let found: Vec<String> = agent_state_candidates(dir.path())
            .into_iter()
            .map(|c| c.path.as_str().to_owned())
            .collect();
        assert_eq!(found, vec![".korvus/agent/state.json"]);
        assert!(is_agent_state(".korvus/agent/state.json"));
        assert!(!is_agent_state(".korvus/agents/x"));
    }
}

//! Input rules every backend applies before writing, so that bad input is the
//! same typed [`StoreError::InvalidInput`] on every backend and nothing is
//! half-written.
//!
//! The rules are the strictest of our backends': PostgreSQL refuses NUL in
//! `text`, and `BIGINT` holds at most `i64::MAX`, so no backend accepts either.

use crate::{
    ContextRef, Counters, NewArtifact, NewIncident, NewReport, NewSession, Settlement, StoreError,
    WorkspaceRef,
};

/// Maximum length in bytes of an incident title.
pub const MAX_TITLE_BYTES: usize = 1024;
/// Maximum length in bytes of a prompt.
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// Maximum length in bytes of a session's runner description
/// ([`NewSession::runner`]).
pub const MAX_RUNNER_BYTES: usize = 4096;
/// Maximum length in bytes of a context-ref role.
pub const MAX_ROLE_BYTES: usize = 128;
/// Maximum length in bytes of an artifact path, blob key, repository or commit.
pub const MAX_PATH_BYTES: usize = 4096;
/// Maximum length in bytes of a content type.
pub const MAX_CONTENT_TYPE_BYTES: usize = 255;
/// Maximum length in bytes of a report's `detail` (4 KiB): enough for the
/// cause-first text of a degraded persist, small enough for every listing.
pub const MAX_REPORT_DETAIL_BYTES: usize = 4096;
/// Longest runner pool name, in bytes.
pub const MAX_POOL_BYTES: usize = 64;
/// Longest queue key or idempotency key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

type Result = std::result::Result<(), StoreError>;

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> StoreError {
    StoreError::InvalidInput {
        field,
        reason: reason.into(),
    }
}

/// Text stored as-is: no NUL byte, at most `max` bytes.
pub fn text(field: &'static str, value: &str, max: usize) -> Result {
    if value.contains('\0') {
        return Err(invalid(field, "contains a NUL byte"));
    }
    if value.len() > max {
        return Err(invalid(
            field,
            format!("is {} bytes, more than the {max} allowed", value.len()),
        ));
    }
    Ok(())
}

/// Like [`text`], and not blank.
pub fn required_text(field: &'static str, value: &str, max: usize) -> Result {
    if value.trim().is_empty() {
        return Err(invalid(field, "is blank"));
    }
    text(field, value, max)
}

/// Counters must fit a signed 64-bit column.
pub fn counters(c: &Counters) -> Result {
    for (field, value) in c.fields() {
        if value > i64::MAX as u64 {
            return Err(invalid(field, format!("{value} exceeds {}", i64::MAX)));
        }
    }
    Ok(())
}

/// Byte sizes must fit a signed 64-bit column.
pub fn size(field: &'static str, value: u64) -> Result {
    if value > i64::MAX as u64 {
        return Err(invalid(field, format!("{value} exceeds {}", i64::MAX)));
    }
    Ok(())
}

/// Every limit of a budget must fit a signed 64-bit column.
pub fn budget_limits(l: &crate::BudgetLimits) -> Result {
    let all = [
        ("budget.input_tokens", l.input_tokens),
        ("budget.output_tokens", l.output_tokens),
        ("budget.tokens", l.tokens),
        ("budget.cost_micros", l.cost_micros),
        ("budget.wall_ms", l.wall_ms),
    ];
    for (field, value) in all {
        size(field, value.unwrap_or(0))?;
    }
    Ok(())
}

/// Revisions start at 1 and must fit a signed 32-bit column.
pub fn revision(value: u32) -> Result {
    if value == 0 || value > i32::MAX as u32 {
        return Err(invalid(
            "revision",
            format!("{value} is not in 1..=i32::MAX"),
        ));
    }
    Ok(())
}

/// A workspace ref names a repository and a commit, both non-blank.
pub fn workspace_ref(w: &WorkspaceRef) -> Result {
    required_text("workspace.repo", &w.repo, MAX_PATH_BYTES)?;
    required_text("workspace.commit", &w.commit, MAX_PATH_BYTES)
}

/// Rules for [`NewIncident`].
pub fn new_incident(n: &NewIncident) -> Result {
    required_text("title", &n.title, MAX_TITLE_BYTES)?;
    n.workspace.as_ref().map_or(Ok(()), workspace_ref)
}

/// Rules for [`NewSession`]. Blank prompts are refused by the session layer,
/// which owns that rule; here only storability is checked.
pub fn new_session(n: &NewSession) -> Result {
    text("prompt", &n.prompt, MAX_PROMPT_BYTES)?;
    if let Some(runner) = &n.runner {
        text("runner", runner, MAX_RUNNER_BYTES)?;
    }
    n.workspace_ref.as_ref().map_or(Ok(()), workspace_ref)?;
    admission(&n.admission)
}

/// Rules for [`Admission`](crate::Admission): a pool of 1 to
/// [`MAX_POOL_BYTES`]; a queue key and an idempotency key, when given, of 1
/// to [`MAX_KEY_BYTES`]; no NUL in any.
pub fn admission(a: &crate::Admission) -> Result {
    required_text("admission.pool", &a.pool, MAX_POOL_BYTES)?;
    if let Some(key) = &a.queue_key {
        required_text("admission.queue_key", key, MAX_KEY_BYTES)?;
    }
    if let Some(key) = &a.idempotency_key {
        required_text("admission.idempotency_key", key, MAX_KEY_BYTES)?;
    }
    Ok(())
}

/// Rules for [`Settlement`].
pub fn settlement(s: &Settlement) -> Result {
    // The exit reason is valid by type (`ExitReason`).
    counters(&s.counters)
}

/// Rules for [`NewReport`].
pub fn new_report(n: &NewReport) -> Result {
    revision(n.revision)?;
    if let Some(key) = &n.manifest_key {
        required_text("manifest_key", key, MAX_PATH_BYTES)?;
    }
    if let Some(key) = &n.markdown_key {
        required_text("markdown_key", key, MAX_PATH_BYTES)?;
    }
    size("markdown_bytes", n.markdown_bytes)?;
    if let Some(detail) = &n.detail {
        text("detail", detail, MAX_REPORT_DETAIL_BYTES)?;
    }
    if let Some(from) = &n.salvaged_from {
        text("salvaged_from", from, MAX_REPORT_DETAIL_BYTES)?;
    }
    counters(&n.counters)
}

/// Rules for the pair [`Coordination::settle_with_report`](crate::Coordination::settle_with_report)
/// writes: the report is of the settled session and presents the
/// settlement's fence.
pub fn report_of_settlement(
    session: crate::SessionId,
    settlement: &Settlement,
    report: &NewReport,
) -> Result {
    if report.session_id != session {
        return Err(invalid("session_id", "the report is of another session"));
    }
    if report.fence != settlement.fence {
        return Err(invalid(
            "fence",
            "the report and the settlement present different fences",
        ));
    }
    Ok(())
}

/// Rules for [`NewArtifact`].
pub fn new_artifact(n: &NewArtifact) -> Result {
    revision(n.revision)?;
    required_text("path", &n.path, MAX_PATH_BYTES)?;
    required_text("blob_key", &n.blob_key, MAX_PATH_BYTES)?;
    required_text("content_type", &n.content_type, MAX_CONTENT_TYPE_BYTES)?;
    size("size_bytes", n.size_bytes)?;
    sha256_hex(&n.sha256)
}

/// Rules for the rows a [`Store::replace_checkpoints`](crate::Store::replace_checkpoints)
/// inserts: each a valid [`NewArtifact`] of `session` at `fence`.
pub fn replacement(session: crate::SessionId, fence: u64, insert: &[NewArtifact]) -> Result {
    for n in insert {
        new_artifact(n)?;
        if n.session_id != session {
            return Err(invalid(
                "session_id",
                "is not the session being replaced in",
            ));
        }
        if n.fence != fence {
            return Err(invalid("fence", "is not the fence being replaced at"));
        }
    }
    Ok(())
}

/// A SHA-256 digest as 64 lower-case hex digits.
pub fn sha256_hex(value: &str) -> Result {
    let ok = value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid("sha256", "is not 64 lower-case hex digits"))
    }
}

/// Rules for a [`ContextRef`].
pub fn context_ref(r: &ContextRef) -> Result {
    required_text("role", &r.role, MAX_ROLE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_length_are_refused_with_the_field_name() {
        let err = text("prompt", "a\0b", 10).unwrap_err();
        assert!(matches!(
            err,
            StoreError::InvalidInput {
                field: "prompt",
                ..
            }
        ));
        let err = text("title", "abcdef", 5).unwrap_err();
        assert!(matches!(
            err,
            StoreError::InvalidInput { field: "title", .. }
        ));
        assert!(text("title", "abcde", 5).is_ok());
        assert!(required_text("title", "  ", 5).is_err());
    }

    #[test]
    fn counters_must_fit_bigint() {
        let c = Counters {
            output_tokens: u64::MAX,
            ..Counters::default()
        };
        let err = counters(&c).unwrap_err();
        assert!(matches!(
            err,
            StoreError::InvalidInput {
                field: "counters.output_tokens",
                ..
            }
        ));
        assert!(counters(&Counters::default()).is_ok());
    }

    #[test]
    fn sha256_must_be_lower_hex() {
        assert!(sha256_hex(&"a".repeat(64)).is_ok());
        assert!(sha256_hex(&"A".repeat(64)).is_err());
        assert!(sha256_hex("abc").is_err());
    }
}

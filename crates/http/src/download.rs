//! Downloads of agent-written bytes: report markdown, artifacts and the turn
//! log export.
//!
//! Everything here was written by an agent, and agents are untrusted: an
//! `.html` or `.svg` it left could carry script. So every download goes out
//! as `Content-Disposition: attachment` (the browser saves it instead of
//! rendering it), with `X-Content-Type-Options: nosniff` (no guessing a
//! renderable type) and `Content-Security-Policy: sandbox` (should it be
//! rendered anyway, it runs in an opaque origin without script).

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use korvus_blob::BlobKey;
use korvus_log::{Access, JsonlExport, LogId};
use korvus_store::{ArtifactId, SessionId};
use tokio_util::io::ReaderStream;

use crate::error::{parse_id, ApiError, ApiPath};
use crate::AppState;

/// The policy of every download: no script, no plugins, no subresources.
pub(crate) const DOWNLOAD_CSP: &str = "sandbox; default-src 'none'";

type Result<T> = std::result::Result<T, ApiError>;

/// `GET /api/sessions/{id}/reports/{revision}`: the report's markdown.
pub(crate) async fn report_markdown(
    State(app): State<AppState>,
    ApiPath((id, revision)): ApiPath<(String, String)>,
) -> Result<Response> {
    let id: SessionId = parse_id("session", &id)?;
    let revision: u32 = revision.parse().ok().filter(|r| *r > 0).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_revision",
            format!("revision {revision:?} is not a positive number"),
        )
    })?;
    let report = app.manager.store().get_report(id, revision).await?;
    let Some(key) = report.markdown_key else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_document",
            format!("revision {revision} has no stored document"),
        ));
    };
    let (body, len) = blob(&app, &key).await?;
    Ok(attachment(
        body,
        Some(len),
        "text/markdown; charset=utf-8",
        &format!("report-{revision}.md"),
    ))
}

/// `GET /api/artifacts/{id}/content`: an artifact's bytes.
pub(crate) async fn artifact_content(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response> {
    let id: ArtifactId = parse_id("artifact", &id)?;
    let artifact = crate::routes::served_artifact(&app, id).await?;
    let (body, len) = blob(&app, &artifact.blob_key).await?;
    let name = artifact.path.rsplit('/').next().unwrap_or("artifact");
    Ok(attachment(body, Some(len), &artifact.content_type, name))
}

/// `GET /api/sessions/{id}/log`: the turn log as JSON lines, streamed a
/// chunk of events at a time (no `Content-Length`: memory per download is
/// one chunk, whatever the log's length). A read failing mid-way ends the
/// body early with an error, so the client sees a cut download, never a
/// short one that looks whole.
pub(crate) async fn log_export(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response> {
    let id: SessionId = parse_id("session", &id)?;
    app.manager.store().get_session(id).await?;
    let handle = app
        .manager
        .turn_log()
        .open(LogId::from_uuid(id.as_uuid()), Access::Read)
        .await
        .map_err(korvus_session::SessionError::from)?;
    let chunks = futures::stream::unfold(Some(JsonlExport::new(handle)), |export| async move {
        let mut export = export?;
        match export.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok(Bytes::from(chunk)), Some(export))),
            Ok(None) => None,
            Err(e) => {
                tracing::error!(error = %e, "log export failed mid-way; the download is cut");
                Some((Err(std::io::Error::other(e)), None))
            }
        }
    });
    Ok(attachment(
        Body::from_stream(chunks),
        None,
        "application/x-ndjson",
        &format!("session-{id}.jsonl"),
    ))
}

/// The object at `key` as a stream: a large artifact is sent as it is
/// read, never held in memory whole.
async fn blob(app: &AppState, key: &str) -> Result<(Body, u64)> {
    let Some(blobs) = app.manager.blob_store() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_document",
            "this server stores no blobs",
        ));
    };
    let key = BlobKey::new(key).map_err(|e| {
        tracing::error!(error = %e, key, "a row names an invalid blob key");
        ApiError::internal("blob_failed", "the stored bytes cannot be read")
    })?;
    match blobs.get_stream(&key).await {
        Ok(reader) => Ok((
            Body::from_stream(ReaderStream::new(reader.body)),
            reader.meta.size,
        )),
        Err(e) => {
            tracing::error!(error = %e, key = %key, "blob read failed");
            Err(ApiError::internal(
                "blob_failed",
                "the stored bytes cannot be read",
            ))
        }
    }
}

/// A download response with the headers described in the module docs.
fn attachment(body: Body, len: Option<u64>, content_type: &str, name: &str) -> Response {
    let content_type = HeaderValue::from_str(content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let disposition = HeaderValue::from_str(&content_disposition(name))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    let mut response = (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_DISPOSITION, disposition),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(DOWNLOAD_CSP),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, no-store"),
            ),
        ],
        body,
    )
        .into_response();
    if let Some(len) = len {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    response
}

/// `attachment; filename="…"; filename*=UTF-8''…` for an agent-chosen name:
/// the plain form keeps only `[A-Za-z0-9._-]` (anything else becomes `_`),
/// the extended form percent-encodes every other byte, so no quote, control
/// character or header break in a name reaches the header.
pub(crate) fn content_disposition(name: &str) -> String {
    let plain: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    let plain = if plain.trim_matches('.').is_empty() {
        "download".to_owned()
    } else {
        plain
    };
    let mut encoded = String::new();
    for b in name.bytes().take(600) {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_') {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{plain}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::content_disposition;

    #[test]
    fn hostile_names_cannot_break_the_header() {
        let h = content_disposition("x\"; filename=evil.html\r\nSet-Cookie: a=b");
        assert!(!h.contains('\r') && !h.contains('\n'));
        assert!(h.starts_with("attachment; filename=\"x__"));
        assert_eq!(h.matches('"').count(), 2, "{h}");
        assert!(axum::http::HeaderValue::from_str(&h).is_ok());
    }

    #[test]
    fn non_ascii_names_keep_their_bytes_in_the_extended_form() {
        let h = content_disposition("bericht-ä.md");
        assert_eq!(
            h,
            "attachment; filename=\"bericht-_.md\"; filename*=UTF-8''bericht-%C3%A4.md"
        );
        assert_eq!(
            content_disposition(".."),
            "attachment; filename=\"download\"; filename*=UTF-8''.."
        );
    }
}

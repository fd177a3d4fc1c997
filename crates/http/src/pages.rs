//! Paginated list routes: `?limit=&after=` in, `{"items": […], "next":
//! cursor | null}` out, with an RFC 8288 `Link: <…>; rel="next"` header
//! while there is a next page.

use axum::extract::OriginalUri;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use korvus_store::{Cursor, Page, Paged, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The query of a list route.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageQuery {
    limit: Option<String>,
    after: Option<String>,
}

impl PageQuery {
    /// The page asked for: `limit` rows (default [`DEFAULT_PAGE_SIZE`],
    /// larger values clamped to [`MAX_PAGE_SIZE`]) after the cursor.
    pub(crate) fn page(&self) -> Result<Page, ApiError> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE_SIZE,
            Some(text) => match text.parse::<u64>() {
                Ok(n) if n >= 1 => u32::try_from(n).unwrap_or(MAX_PAGE_SIZE),
                // Clamped like any other number past the maximum, however
                // many digits it has.
                Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => MAX_PAGE_SIZE,
                _ => {
                    return Err(ApiError::bad_request(
                        "invalid_input",
                        format!("limit must be a whole number from 1 to {MAX_PAGE_SIZE}"),
                    ))
                }
            },
        };
        match self.after.as_deref() {
            None => Ok(Page::first(limit)),
            Some(text) => Ok(Page::after(Cursor::parse(text)?, limit)),
        }
    }
}

/// One page as the response: the JSON body and, when there is a next page,
/// its `Link` (the request's path with `limit` and `after`).
pub(crate) fn respond<T: Serialize>(uri: &OriginalUri, page: &Page, paged: Paged<T>) -> Response {
    let mut headers = HeaderMap::new();
    if let Some(next) = &paged.next {
        let link = format!(
            "<{}?limit={}&after={}>; rel=\"next\"",
            uri.0.path(),
            page.limit(),
            next.as_str()
        );
        if let Ok(value) = HeaderValue::from_str(&link) {
            headers.insert(header::LINK, value);
        }
    }
    (headers, Json(paged)).into_response()
}

//! Turning SDK errors into the source of a
//! [`BlobError::Backend`](korvus_blob::BlobError::Backend), classifying
//! them, and mapping them to the seam's errors ([`read_error`],
//! [`write_error`]).
//!
//! The SDK error itself is not kept: [`Failure`] holds only the operation,
//! the HTTP status, S3's error code and message, or the transport failure in
//! words — nothing from the request, so no credential can reach a log line or
//! an error message through it.
//!
//! An answer saying the bucket is in another region than the store is
//! configured for (`301 PermanentRedirect`, `400 AuthorizationHeaderMalformed`,
//! any answer with an `x-amz-bucket-region` header naming another region)
//! names the bucket and the region S3 expects, so `korvus` and
//! `Manager::check` tell the operator what to set.

use std::fmt;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use korvus_blob::{BlobError, BlobKey};

/// What the failure means for the seam.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// 404, `NoSuchKey`, `NotFound` — but not `NoSuchBucket`.
    NotFound,
    /// The server refused the bytes because they do not match the checksum
    /// sent with them.
    ChecksumMismatch,
    /// Anything else.
    Other,
}

/// Error codes S3-compatible servers use for a checksum that does not match
/// the bytes (AWS: `BadDigest`; MinIO also `XAmzContentChecksumMismatch`).
const CHECKSUM_CODES: &[&str] = &["BadDigest", "XAmzContentChecksumMismatch"];

/// Error codes of an answer that the bucket is in another region (or must
/// be reached at another endpoint).
const REGION_CODES: &[&str] = &[
    "PermanentRedirect",
    "AuthorizationHeaderMalformed",
    "IllegalLocationConstraintException",
];

/// The header S3 names a bucket's region in.
const BUCKET_REGION_HEADER: &str = "x-amz-bucket-region";

/// What a store's calls are made to: its errors name them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) bucket: &'a str,
    /// The region the client signs for, if it has one.
    pub(crate) region: Option<&'a str>,
}

/// A failed S3 call, described without secrets.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    operation: &'static str,
    detail: String,
}

impl Failure {
    pub(crate) fn plain(operation: &'static str, detail: impl Into<String>) -> Self {
        Self {
            operation,
            detail: detail.into(),
        }
    }

    pub(crate) fn from_sdk<E>(
        operation: &'static str,
        target: &Target<'_>,
        error: &SdkError<E>,
    ) -> Self
    where
        E: ProvideErrorMetadata,
    {
        let mut detail = match error {
            SdkError::ServiceError(service) => {
                let status = error
                    .raw_response()
                    .map(|r| r.status().as_u16().to_string())
                    .unwrap_or_else(|| "?".to_owned());
                let meta = service.err();
                format!(
                    "HTTP {status} {}: {}",
                    meta.code().unwrap_or("(no error code)"),
                    meta.message().unwrap_or("(no message)")
                )
            }
            SdkError::TimeoutError(_) => "timed out (the configured operation timeout)".to_owned(),
            SdkError::DispatchFailure(failure) => {
                let what = if failure.is_timeout() {
                    "timed out"
                } else if failure.is_io() {
                    "could not reach the endpoint"
                } else {
                    "the request could not be sent"
                };
                match failure.as_connector_error() {
                    Some(cause) => format!("{what}: {}", DisplayErrorContext(cause)),
                    None => what.to_owned(),
                }
            }
            SdkError::ResponseError(_) => "the response could not be read".to_owned(),
            SdkError::ConstructionFailure(_) => "the request could not be built".to_owned(),
            _ => "failed".to_owned(),
        };
        if let Some(region) = wrong_region(target, error) {
            detail.push_str("; ");
            detail.push_str(&region);
        }
        Self { operation, detail }
    }

    pub(crate) fn kind<E: ProvideErrorMetadata>(error: &SdkError<E>) -> Kind {
        let SdkError::ServiceError(service) = error else {
            return Kind::Other;
        };
        let code = service.err().code();
        if code.is_some_and(|c| CHECKSUM_CODES.contains(&c)) {
            return Kind::ChecksumMismatch;
        }
        match code {
            Some("NoSuchKey" | "NotFound") => Kind::NotFound,
            Some("NoSuchBucket") => Kind::Other,
            _ if error
                .raw_response()
                .is_some_and(|r| r.status().as_u16() == 404) =>
            {
                Kind::NotFound
            }
            _ => Kind::Other,
        }
    }
}

/// When `error` says the bucket is in another region than `target`'s:
/// which bucket, the region S3 expects (from the `x-amz-bucket-region`
/// header, the error's `<Region>`, or an `AuthorizationHeaderMalformed`
/// message's "expecting '…'") and the one configured.
fn wrong_region<E: ProvideErrorMetadata>(
    target: &Target<'_>,
    error: &SdkError<E>,
) -> Option<String> {
    let SdkError::ServiceError(service) = error else {
        return None;
    };
    let raw = service.raw();
    let meta = service.err();
    let header = raw.headers().get(BUCKET_REGION_HEADER).map(str::to_owned);
    let body = raw
        .body()
        .bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    let expected = header
        .clone()
        .or_else(|| between(&body, "<Region>", "</Region>"))
        .or_else(|| between(meta.message().unwrap_or_default(), "expecting '", "'"))
        .filter(|r| is_region(r));
    let configured = target.region.unwrap_or("(none)");
    let refused =
        raw.status().as_u16() == 301 || meta.code().is_some_and(|c| REGION_CODES.contains(&c));
    let bucket = target.bucket;
    match expected {
        Some(expected) if expected != configured && (refused || header.is_some()) => Some(format!(
            "the bucket {bucket:?} is in region {expected}, not {configured} as configured: \
             set the store's region to {expected}"
        )),
        None if refused => Some(format!(
            "the bucket {bucket:?} is not in region {configured} as configured (S3 did not say \
             which region it is in): set the store's region to the bucket's"
        )),
        _ => None,
    }
}

/// The text between the first `open` and the next `close` in `text`.
fn between(text: &str, open: &str, close: &str) -> Option<String> {
    let (_, rest) = text.split_once(open)?;
    let (inside, _) = rest.split_once(close)?;
    Some(inside.to_owned())
}

/// Whether `text` looks like a region name (`eu-west-1`): a short run of
/// lowercase letters, digits and `-`, so nothing else of an answer is
/// quoted.
fn is_region(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 32
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3 {} failed: {}", self.operation, self.detail)
    }
}

impl std::error::Error for Failure {}

/// The seam's error for a failed read of `key`: a missing object is
/// [`BlobError::NotFound`], anything else `Backend`.
pub(crate) fn read_error<E>(
    operation: &'static str,
    target: &Target<'_>,
    key: &BlobKey,
    error: SdkError<E>,
) -> BlobError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match Failure::kind(&error) {
        Kind::NotFound => BlobError::NotFound {
            key: key.to_string(),
        },
        _ => BlobError::backend("s3", Failure::from_sdk(operation, target, &error)),
    }
}

/// The seam's error for a failed write of `key`: bytes the server refused
/// for their checksum are [`BlobError::ChecksumMismatch`], anything else
/// `Backend`.
pub(crate) fn write_error<E>(
    operation: &'static str,
    target: &Target<'_>,
    key: &BlobKey,
    error: SdkError<E>,
) -> BlobError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match Failure::kind(&error) {
        Kind::ChecksumMismatch => BlobError::ChecksumMismatch {
            key: key.to_string(),
        },
        _ => BlobError::backend("s3", Failure::from_sdk(operation, target, &error)),
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_s3::config::http::HttpResponse;
    use aws_sdk_s3::error::ErrorMetadata;
    use aws_sdk_s3::operation::head_object::HeadObjectError;
    use aws_sdk_s3::operation::put_object::PutObjectError;
    use aws_sdk_s3::primitives::SdkBody;

    use super::*;

    const TARGET: Target<'static> = Target {
        bucket: "korvus-blobs",
        region: Some("us-east-1"),
    };

    /// An S3 answer: `status`, its headers, and an error of `code` with
    /// `message` parsed from `body`.
    fn answer(
        status: u16,
        headers: &[(&'static str, &'static str)],
        body: &'static str,
        code: Option<&str>,
        message: Option<&str>,
    ) -> SdkError<PutObjectError, HttpResponse> {
        let mut raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::from(body));
        for (name, value) in headers {
            raw.headers_mut().insert(*name, *value);
        }
        let mut meta = ErrorMetadata::builder();
        if let Some(code) = code {
            meta = meta.code(code);
        }
        if let Some(message) = message {
            meta = meta.message(message);
        }
        SdkError::service_error(PutObjectError::generic(meta.build()), raw)
    }

    /// What `Manager::check` prints of a failed write: the seam's error
    /// and its sources, joined with `: `.
    fn says(error: SdkError<PutObjectError, HttpResponse>) -> String {
        let e = write_error("PutObject", &TARGET, &BlobKey::new("a/b").unwrap(), error);
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    }

    #[test]
    fn a_permanent_redirect_names_the_bucket_and_the_region_s3_expects() {
        let redirect = answer(
            301,
            &[("x-amz-bucket-region", "eu-west-1")],
            "<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to \
             access must be addressed using the specified endpoint.</Message>\
             <Endpoint>korvus-blobs.s3.eu-west-1.amazonaws.com</Endpoint></Error>",
            Some("PermanentRedirect"),
            Some("The bucket you are attempting to access must be addressed using the specified endpoint."),
        );
        let text = Failure::from_sdk("PutObject", &TARGET, &redirect).to_string();
        assert!(
            text.starts_with("S3 PutObject failed: HTTP 301 PermanentRedirect: "),
            "{text}"
        );
        assert!(
            text.ends_with(
                "the bucket \"korvus-blobs\" is in region eu-west-1, not us-east-1 as \
                 configured: set the store's region to eu-west-1"
            ),
            "{text}"
        );
        // A HEAD answer has no body, only the status and the header.
        let head: SdkError<HeadObjectError, HttpResponse> = {
            let mut raw = HttpResponse::new(301.try_into().unwrap(), SdkBody::empty());
            raw.headers_mut()
                .insert("x-amz-bucket-region", "ap-south-2");
            SdkError::service_error(
                HeadObjectError::generic(ErrorMetadata::builder().build()),
                raw,
            )
        };
        let text = Failure::from_sdk("HeadObject", &TARGET, &head).to_string();
        assert!(
            text.contains("\"korvus-blobs\" is in region ap-south-2, not us-east-1"),
            "{text}"
        );
    }

    #[test]
    fn a_malformed_authorization_header_names_the_region_from_its_body_or_message() {
        let body = "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization \
                    header is malformed; the region 'us-east-1' is wrong; expecting \
                    'eu-central-1'</Message><Region>eu-central-1</Region></Error>";
        let message = "The authorization header is malformed; the region 'us-east-1' is wrong; \
                       expecting 'eu-central-1'";
        for (body, what) in [(body, "the body's Region"), ("", "the message")] {
            let e = answer(
                400,
                &[],
                body,
                Some("AuthorizationHeaderMalformed"),
                Some(message),
            );
            let text = says(e);
            assert!(
                text.contains(
                    "the bucket \"korvus-blobs\" is in region eu-central-1, not us-east-1 as \
                     configured: set the store's region to eu-central-1"
                ),
                "{what}: {text}"
            );
        }
    }

    #[test]
    fn a_redirect_without_a_region_still_names_the_bucket_and_other_errors_say_nothing_of_regions()
    {
        let bare = answer(301, &[], "", None, None);
        let text = Failure::from_sdk("PutObject", &TARGET, &bare).to_string();
        assert!(
            text.contains("the bucket \"korvus-blobs\" is not in region us-east-1 as configured"),
            "{text}"
        );
        let denied = answer(403, &[], "", Some("AccessDenied"), Some("Access Denied"));
        let text = Failure::from_sdk("PutObject", &TARGET, &denied).to_string();
        assert_eq!(
            text,
            "S3 PutObject failed: HTTP 403 AccessDenied: Access Denied"
        );
        // The bucket's own region in the header is no complaint.
        let same = answer(
            403,
            &[("x-amz-bucket-region", "us-east-1")],
            "",
            Some("AccessDenied"),
            None,
        );
        let text = Failure::from_sdk("PutObject", &TARGET, &same).to_string();
        assert!(!text.contains("region"), "{text}");
    }
}

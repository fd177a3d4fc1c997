//! Listings and batch deletes of [`S3BlobStore`]: `ListObjectsV2`, whole
//! or one page from a cursor (`StartAfter`), and `DeleteObjects`.

use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use korvus_blob::{BlobError, BlobKey, BlobMeta, Result};

use super::{to_system_time, S3BlobStore};
use crate::error::Failure;

/// Most keys S3 takes in one `DeleteObjects` request.
pub(crate) const DELETE_BATCH: usize = 1000;

/// One `ListObjectsV2` answer, turned into ours.
struct Listed {
    /// The objects that are valid keys under the prefix.
    found: Vec<BlobMeta>,
    /// The last raw object key of the answer (a cursor for the next).
    last: Option<String>,
    /// The server has more.
    truncated: bool,
    /// The continuation token, when truncated.
    token: Option<String>,
}

impl S3BlobStore {
    /// The `Prefix` to ask for: `a/b` must list `a/b` and `a/b/…` but
    /// not `a/bc`, so ask for `a/b` and keep whole-segment matches.
    fn search(&self, prefix: Option<&BlobKey>) -> String {
        match (&self.settings.key_prefix, prefix) {
            (Some(base), Some(p)) => format!("{base}/{p}"),
            (Some(base), None) => format!("{base}/"),
            (None, Some(p)) => p.to_string(),
            (None, None) => String::new(),
        }
    }

    /// One `ListObjectsV2` request.
    async fn list_once(
        &self,
        prefix: Option<&BlobKey>,
        search: &str,
        max_keys: i32,
        start_after: Option<String>,
        token: Option<String>,
    ) -> Result<Listed> {
        let mut request = self
            .client
            .list_objects_v2()
            .bucket(&self.settings.bucket)
            .max_keys(max_keys)
            .set_start_after(start_after)
            .set_continuation_token(token);
        if !search.is_empty() {
            request = request.prefix(search);
        }
        let page = request.send().await.map_err(|e| {
            BlobError::backend("s3", Failure::from_sdk("ListObjectsV2", &self.target(), &e))
        })?;
        let mut found = Vec::with_capacity(page.contents().len());
        let mut last = None;
        for object in page.contents() {
            last = object.key().map(ToOwned::to_owned);
            let Some(key) = object.key().and_then(|k| self.store_key(k)) else {
                continue;
            };
            if prefix.is_some_and(|p| !key.is_under(p)) {
                continue;
            }
            found.push(BlobMeta {
                key,
                size: object
                    .size()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
                content_type: None,
                sha256: None,
                last_modified: object.last_modified().and_then(to_system_time),
            });
        }
        Ok(Listed {
            found,
            last,
            truncated: page.is_truncated() == Some(true),
            token: page.next_continuation_token().map(ToOwned::to_owned),
        })
    }

    /// Every object under `prefix`, through continuation tokens.
    pub(super) async fn list_all(&self, prefix: Option<&BlobKey>) -> Result<Vec<BlobMeta>> {
        let search = self.search(prefix);
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .list_once(
                    prefix,
                    &search,
                    self.settings.list_page_size,
                    None,
                    token.take(),
                )
                .await?;
            found.extend(page.found);
            if !page.truncated {
                break;
            }
            if page.token.is_none() {
                return Err(no_token());
            }
            token = page.token;
        }
        // S3 lists in UTF-8 byte order, which is `BlobKey`'s order too; sort
        // anyway, since not every S3-compatible server keeps to it.
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    /// At most `limit` objects under `prefix` after `after`: requests from
    /// the cursor (`StartAfter`) until the page is full or the listing ends
    /// (objects dropped as not whole-segment matches or not valid keys
    /// cost a further request).
    pub(super) async fn list_from(
        &self,
        prefix: Option<&BlobKey>,
        after: Option<&BlobKey>,
        limit: usize,
    ) -> Result<Vec<BlobMeta>> {
        let search = self.search(prefix);
        // Keys under a prefix are the prefix itself and those from `p/` on;
        // once the listing is past that block nothing under it follows.
        let block = prefix.map(|_| format!("{search}/"));
        let mut cursor = after.map(|a| self.object_key(a)).transpose()?;
        let mut found: Vec<BlobMeta> = Vec::new();
        while found.len() < limit {
            let want = (limit - found.len())
                .min(usize::try_from(self.settings.list_page_size).unwrap_or(1000));
            let asked = cursor.take();
            let page = self
                .list_once(
                    prefix,
                    &search,
                    i32::try_from(want).unwrap_or(1000),
                    asked.clone(),
                    None,
                )
                .await?;
            found.extend(page.found);
            if !page.truncated {
                break;
            }
            let Some(last) = page.last else {
                return Err(no_progress("a truncated answer listed no keys"));
            };
            // A server that ignored the cursor would loop for ever.
            if asked.as_deref().is_some_and(|a| last.as_str() <= a) {
                return Err(no_progress("an answer did not move past its StartAfter"));
            }
            if block
                .as_deref()
                .is_some_and(|b| last.as_str() > b && !last.starts_with(b))
            {
                break;
            }
            cursor = Some(last);
        }
        // As in `list_all`: not every S3-compatible server keeps the order.
        found.sort_by(|a, b| a.key.cmp(&b.key));
        found.truncate(limit);
        Ok(found)
    }

    /// Deletes `keys` with `DeleteObjects`, [`DELETE_BATCH`] per request,
    /// in quiet mode (the answer lists only failures); a request that
    /// fails as a whole fails each of its keys.
    pub(super) async fn delete_batches(&self, keys: &[BlobKey]) -> Vec<(BlobKey, BlobError)> {
        let mut failed = Vec::new();
        for chunk in keys.chunks(DELETE_BATCH) {
            if let Err(e) = self.delete_batch(chunk, &mut failed).await {
                failed.extend(
                    chunk
                        .iter()
                        .map(|k| (k.clone(), BlobError::backend("s3", e.clone()))),
                );
            }
        }
        failed
    }

    async fn delete_batch(
        &self,
        chunk: &[BlobKey],
        failed: &mut Vec<(BlobKey, BlobError)>,
    ) -> std::result::Result<(), Failure> {
        let mut objects = Vec::with_capacity(chunk.len());
        for key in chunk {
            match self.object_key(key) {
                Ok(object_key) => objects.push(
                    ObjectIdentifier::builder()
                        .key(object_key)
                        .build()
                        .map_err(|e| Failure::plain("DeleteObjects", e.to_string()))?,
                ),
                Err(e) => failed.push((key.clone(), e)),
            }
        }
        if objects.is_empty() {
            return Ok(());
        }
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| Failure::plain("DeleteObjects", e.to_string()))?;
        let out = self
            .client
            .delete_objects()
            .bucket(&self.settings.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| Failure::from_sdk("DeleteObjects", &self.target(), &e))?;
        for error in out.errors() {
            if error.code() == Some("NoSuchKey") {
                continue; // gone already: deleted
            }
            let Some(key) = error.key().and_then(|k| self.store_key(k)) else {
                continue;
            };
            let detail = format!(
                "{}: {}",
                error.code().unwrap_or("(no error code)"),
                error.message().unwrap_or("(no message)")
            );
            failed.push((
                key,
                BlobError::backend("s3", Failure::plain("DeleteObjects", detail)),
            ));
        }
        Ok(())
    }
}

fn no_progress(what: &str) -> BlobError {
    BlobError::backend("s3", Failure::plain("ListObjectsV2", what.to_owned()))
}

fn no_token() -> BlobError {
    BlobError::backend(
        "s3",
        Failure::plain(
            "ListObjectsV2",
            "a truncated page has no continuation token",
        ),
    )
}

//! Keyset pagination: a [`Page`] asks for at most `limit` rows after a
//! [`Cursor`]; a [`Paged`] answers with them and the cursor of the next
//! page, if there is one.
//!
//! Every list of the [`Store`](crate::Store) is ordered by a key that never
//! changes for a row, and a page is "the first `limit` rows whose key is
//! greater than the cursor": a walk costs one indexed range read per page,
//! whatever the table's size, and returns every row committed before it
//! began exactly once, in order. Rows committed during a walk appear if
//! their key lands ahead of the cursor. Sessions (by `seq`) and reports (by
//! revision) are numbered by the store, so new ones always land ahead;
//! incidents and artifacts are ordered by their ids, which callers mint
//! (UUID v7, so roughly by time), so a row committed during a walk may
//! land behind the cursor and be missed by that walk.

use std::future::Future;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Result, StoreError};

/// Rows a page holds when no limit is given.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// The most rows one page holds; larger limits are clamped to it.
pub const MAX_PAGE_SIZE: u32 = 1_000;

/// Longest cursor accepted (a UUID is 36 characters).
const MAX_CURSOR: usize = 64;

/// A request for one page of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    limit: u32,
    after: Option<Cursor>,
}

impl Default for Page {
    /// The first page of [`DEFAULT_PAGE_SIZE`] rows.
    fn default() -> Self {
        Self::first(DEFAULT_PAGE_SIZE)
    }
}

impl Page {
    /// The first `limit` rows (clamped to 1..=[`MAX_PAGE_SIZE`]).
    pub fn first(limit: u32) -> Self {
        Self {
            limit: limit.clamp(1, MAX_PAGE_SIZE),
            after: None,
        }
    }

    /// The `limit` rows after `cursor` (clamped as in [`Page::first`]).
    pub fn after(cursor: Cursor, limit: u32) -> Self {
        Self {
            after: Some(cursor),
            ..Self::first(limit)
        }
    }

    /// How many rows at most.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The cursor the rows come after (`None`: from the start).
    pub fn cursor(&self) -> Option<&Cursor> {
        self.after.as_ref()
    }

    /// The lower bound of an id-ordered list: the cursor's id, or the nil
    /// UUID (below every id) on the first page.
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) when the cursor is not an id.
    pub fn after_id(&self) -> Result<Uuid> {
        match &self.after {
            None => Ok(Uuid::nil()),
            Some(c) => Uuid::try_parse(&c.0).map_err(|_| bad_cursor(c)),
        }
    }

    /// The lower bound of a number-ordered list (`seq`, revision): the
    /// cursor's number, or 0 on the first page.
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) when the cursor is not such a number.
    pub fn after_number(&self) -> Result<u32> {
        match &self.after {
            None => Ok(0),
            Some(c) => c.0.parse::<u32>().map_err(|_| bad_cursor(c)),
        }
    }

    /// The answer to this page from `rows` fetched with one row more than
    /// the limit (`LIMIT limit + 1`): at most `limit` rows, and the next
    /// cursor (the last row's `key`) when the extra row came back.
    pub fn finish<T>(&self, mut rows: Vec<T>, key: impl Fn(&T) -> String) -> Paged<T> {
        let limit = self.limit as usize;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(|r| Cursor(key(r)))
        } else {
            None
        };
        Paged { items: rows, next }
    }

    /// `LIMIT` for a query answering this page: one more than the limit.
    pub fn fetch(&self) -> i64 {
        i64::from(self.limit) + 1
    }
}

fn bad_cursor(c: &Cursor) -> StoreError {
    StoreError::InvalidInput {
        field: "cursor",
        reason: format!("{:?} is not a cursor of this list", c.0),
    }
}

/// A position in a list: the key of the last row of the previous page.
/// Opaque to callers; it round-trips through text (`as_str`, `parse`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cursor(String);

impl Cursor {
    /// The cursor as text (for a URL or a command line).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A cursor read back from text.
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) for empty text, text longer than 64 bytes
    /// or characters no cursor has; whether it fits a given list is checked
    /// when the page is read.
    pub fn parse(text: &str) -> Result<Self> {
        let fits = !text.is_empty()
            && text.len() <= MAX_CURSOR
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if fits {
            Ok(Self(text.to_owned()))
        } else {
            Err(bad_cursor(&Self(text.chars().take(MAX_CURSOR).collect())))
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paged<T> {
    /// The rows, in the list's order.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` on the last page.
    pub next: Option<Cursor>,
}

/// Every row of a list, walked page by page ([`MAX_PAGE_SIZE`] rows at a
/// time): `list` answers one page. For callers that need the whole list
/// (and know it is small); the rest should page.
///
/// # Errors
/// The first error of `list`.
///
/// # Cancel safety
/// As cancel safe as `list`: a dropped walk only drops the rows read so far.
pub async fn walk<T, F, Fut>(mut list: F) -> Result<Vec<T>>
where
    F: FnMut(Page) -> Fut,
    Fut: Future<Output = Result<Paged<T>>>,
{
    let mut all = Vec::new();
    let mut page = Page::first(MAX_PAGE_SIZE);
    loop {
        let Paged { items, next } = list(page).await?;
        all.extend(items);
        match next {
            Some(cursor) => page = Page::after(cursor, MAX_PAGE_SIZE),
            None => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_clamped_and_cursors_checked() {
        assert_eq!(Page::first(0).limit(), 1);
        assert_eq!(Page::first(5_000).limit(), MAX_PAGE_SIZE);
        assert_eq!(Page::default().limit(), DEFAULT_PAGE_SIZE);
        for bad in ["", "a b", "x/y", &"a".repeat(65)] {
            assert!(Cursor::parse(bad).is_err(), "{bad:?}");
        }
        let seq = Page::after(Cursor::parse("17").unwrap(), 2);
        assert_eq!(seq.after_number().unwrap(), 17);
        assert!(seq.after_id().is_err());
        let id = Uuid::now_v7();
        let by_id = Page::after(Cursor::parse(&id.to_string()).unwrap(), 2);
        assert_eq!(by_id.after_id().unwrap(), id);
        assert!(by_id.after_number().is_err());
    }

    #[test]
    fn a_page_keeps_its_limit_and_points_past_its_last_row() {
        let page = Page::first(2);
        let paged = page.finish(vec![1, 2, 3], ToString::to_string);
        assert_eq!(paged.items, [1, 2]);
        assert_eq!(paged.next.as_ref().map(Cursor::as_str), Some("2"));
        let last = page.finish(vec![1, 2], ToString::to_string);
        assert_eq!(last.next, None);
    }
}

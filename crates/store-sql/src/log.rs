//! The [`TurnLog`](korvus_log::TurnLog) both engines share: [`sql_log!`]
//! writes the service type, its per-log I/O and their impls once, calling
//! the [`LogDialect`] each engine supplies itself.
//!
//! The engines differ only in how an `append` numbers and inserts a batch of
//! events in one transaction; creating, opening, listing, `stat` and reading
//! are the same statements on both. [`sql_log!`] is a macro for the reason
//! [`sql_store!`](crate::store::sql_store) is.

#[cfg(doc)]
use crate::dialect::LogDialect;

/// Defines a SQL turn-log service over one engine's pool, the per-log I/O
/// type behind its handles, and implements `TurnLog` and `LogIo` for them
/// with the statements both engines share; the I/O type must also implement
/// [`LogDialect`] (in the engine's module).
///
/// `sql_log! { /// docs… pub struct PgLog(PgPool) beside PgStore, io PgLogIo; }`
/// defines `PgLog` with `new` and `pool`, and `PgLogIo`; `PgStore` is only
/// named in the docs of `pool`, as the store that shares the pool.
macro_rules! sql_log {
    (
        $(#[$attr:meta])*
        pub struct $log:ident($pool:ty) beside $store:ident, io $io:ident;
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone)]
        pub struct $log {
            pool: $pool,
            writers: korvus_log::Writers,
        }

        impl $log {
            /// A turn-log service over `pool`, which must have been migrated
            /// with [`migrate`](fn@crate::migrate).
            pub fn new(pool: $pool) -> Self {
                Self {
                    pool,
                    writers: korvus_log::Writers::new(),
                }
            }

            #[doc = concat!("The pool, e.g. to share it with a [`", stringify!($store), "`].")]
            pub fn pool(&self) -> &$pool {
                &self.pool
            }
        }

        /// One log's reads and appends, behind its [`LogHandle`](korvus_log::LogHandle)s.
        #[derive(Debug)]
        struct $io {
            pool: $pool,
            id: korvus_log::LogId,
            /// This writer's epoch (0 until it claims one); an append is
            /// stored only while the log's newest epoch is not newer, and
            /// records this one as the newest.
            epoch: std::sync::atomic::AtomicU64,
            /// This service created the log and nothing was appended yet:
            /// a claim then records itself with the first append (one
            /// statement less per session), since no writer of the new log
            /// can hold a newer epoch than its creator's first claim.
            fresh: std::sync::atomic::AtomicBool,
        }

        // A scope of its own, so the shared code names what it uses here and
        // not in each engine module.
        const _: () = {
            use std::sync::Arc;

            use async_trait::async_trait;
            use korvus_log::{
                Access, Event, FlushError, LogError, LogHandle, LogHeader, LogId, LogIo, LogStat,
                Result, TurnLog,
            };
            use uuid::Uuid;

            use $crate::error::{is_unique_violation, log_backend};
            use $crate::completed::Completed as _;
            use $crate::dialect::LogDialect;
            use $crate::log_rows::{self, LogRow};
            use $crate::sql;

            /// The `backend` name in this engine's `Backend` errors.
            const BACKEND: &str = <$io as LogDialect>::BACKEND;

            /// Records `epoch` as the newest of log `id` in one statement,
            /// unless the log has seen a newer one: what a writer's claim
            /// and a fence do. An append checks the epoch in its own
            /// statement, under the same row lock, so it is stored before
            /// this or refused after it.
            async fn record_epoch(pool: &$pool, id: LogId, epoch: u64) -> Result<()> {
                let newest = log_rows::to_epoch(id, epoch)?;
                let done = sqlx::query(sql::CLAIM_EPOCH)
                .bind(id.as_uuid())
                .bind(newest)
                .execute(pool)
                .await
                .map_err(log_backend(BACKEND))?;
                if done.rows_affected() == 0 {
                    // Failure path only: unknown log, or a newer epoch.
                    let found: Option<i64> =
                        sqlx::query_scalar(sql::SELECT_EPOCH)
                            .bind(id.as_uuid())
                            .fetch_optional_completed(pool)
                            .await
                            .map_err(log_backend(BACKEND))?;
                    let found = found.ok_or(LogError::NotFound { id })?;
                    return Err(LogError::Fenced {
                        id,
                        epoch,
                        newest: u64::try_from(found).unwrap_or_default(),
                    });
                }
                Ok(())
            }

            impl $log {
                async fn row(&self, id: LogId) -> Result<LogRow> {
                    let row: Option<LogRow> = sqlx::query_as(sql::SELECT_LOG)
                    .bind(id.as_uuid())
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(log_backend(BACKEND))?;
                    row.ok_or(LogError::NotFound { id })
                }

                fn handle(&self, header: LogHeader, access: Access, fresh: bool) -> Result<LogHandle> {
                    let io = Arc::new($io {
                        pool: self.pool.clone(),
                        id: header.id,
                        epoch: std::sync::atomic::AtomicU64::new(0),
                        fresh: std::sync::atomic::AtomicBool::new(fresh),
                    });
                    Ok(match access {
                        Access::Read => LogHandle::reader(header, io),
                        Access::Write => {
                            let claim = self.writers.claim(header.id)?;
                            LogHandle::writer(header, io, claim)
                        }
                    })
                }
            }

            #[async_trait]
            impl TurnLog for $log {
                async fn create(&self, header: LogHeader) -> Result<LogHandle> {
                    let id = header.id;
                    let text = log_rows::header_json(BACKEND, &header)?;
                    sqlx::query(sql::INSERT_LOG)
                    .bind(id.as_uuid())
                    .bind(&text)
                    .bind(log_rows::line_bytes(&text))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| {
                        if is_unique_violation(&e) {
                            LogError::AlreadyExists { id }
                        } else {
                            log_backend(BACKEND)(e)
                        }
                    })?;
                    self.handle(header, Access::Write, true)
                }

                async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
                    let header = self.row(id).await?.header(id)?;
                    self.handle(header, access, false)
                }

                async fn stat(&self, id: LogId) -> Result<LogStat> {
                    self.row(id).await?.stat(id)
                }

                async fn list(&self) -> Result<Vec<LogId>> {
                    let ids: Vec<Uuid> = sqlx::query_scalar(sql::LIST_LOGS)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(log_backend(BACKEND))?;
                    Ok(ids.into_iter().map(LogId::from_uuid).collect())
                }

                async fn delete(&self, id: LogId) -> Result<()> {
                    // No writer of this service meanwhile; one elsewhere
                    // finds the log gone at its next append.
                    let _claim = self.writers.claim(id)?;
                    let mut tx = self.pool.begin().await.map_err(log_backend(BACKEND))?;
                    for statement in [sql::DELETE_LOG_EVENTS, sql::DELETE_LOG] {
                        sqlx::query(statement)
                            .bind(id.as_uuid())
                            .execute(&mut *tx)
                            .await
                            .map_err(log_backend(BACKEND))?;
                    }
                    tx.commit().await.map_err(log_backend(BACKEND))
                }

                async fn fence(&self, id: LogId, epoch: u64) -> Result<()> {
                    record_epoch(&self.pool, id, epoch).await
                }

                async fn flush(&self) -> std::result::Result<(), FlushError> {
                    self.writers.flush_all().await
                }
            }

            impl $io {
                /// The stored texts of events `at..at + n`.
                async fn bodies_at(&self, at: u64, n: usize) -> Result<Vec<String>> {
                    let Some((start, limit)) = log_rows::window(at, Some(n as u64)) else {
                        return Ok(Vec::new());
                    };
                    sqlx::query_scalar(sql::READ_BODIES)
                    .bind(self.id.as_uuid())
                    .bind(start)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(log_backend(BACKEND))
                }
            }

            #[async_trait]
            impl LogIo for $io {
                async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
                    let Some((start, limit)) = log_rows::window(offset, len) else {
                        return Ok(Vec::new());
                    };
                    let rows: Vec<(i64, String)> = sqlx::query_as(sql::READ_EVENTS)
                    .bind(self.id.as_uuid())
                    .bind(start)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(log_backend(BACKEND))?;
                    log_rows::events(self.id, start, rows)
                }

                async fn event_count(&self) -> Result<u64> {
                    let count: Option<i64> =
                        sqlx::query_scalar(sql::EVENT_COUNT)
                            .bind(self.id.as_uuid())
                            .fetch_optional_completed(&self.pool)
                            .await
                            .map_err(log_backend(BACKEND))?;
                    let count = count.ok_or(LogError::NotFound { id: self.id })?;
                    log_rows::count(self.id, count)
                }

                async fn claim(&self, epoch: u64) -> Result<()> {
                    log_rows::to_epoch(self.id, epoch)?;
                    if !self.fresh.load(std::sync::atomic::Ordering::SeqCst) {
                        record_epoch(&self.pool, self.id, epoch).await?;
                    }
                    // (On a fresh log, the first append records it: see `fresh`.)
                    self.epoch.store(epoch, std::sync::atomic::Ordering::SeqCst);
                    Ok(())
                }

                async fn append(&self, at: u64, events: &[Event]) -> Result<()> {
                    let (bodies, bytes) = log_rows::event_lines(BACKEND, events)?;
                    if bodies.is_empty() {
                        return Ok(());
                    }
                    let epoch = self.epoch.load(std::sync::atomic::Ordering::SeqCst);
                    self.fresh.store(false, std::sync::atomic::Ordering::SeqCst);
                    let Some(found) = self.append_bodies(at, &bodies, bytes, epoch).await? else {
                        return Ok(());
                    };
                    // Not stored: done already only when an earlier try of
                    // this very append committed — the same texts at `at`.
                    let found = log_rows::count(self.id, found)?;
                    if found == at + bodies.len() as u64 && self.bodies_at(at, bodies.len()).await? == bodies {
                        return Ok(());
                    }
                    Err(LogError::Conflict {
                        id: self.id,
                        expected: at,
                        found,
                    })
                }

                async fn flush(&self) -> Result<()> {
                    // Every append is committed before it returns.
                    Ok(())
                }

                async fn close(&self) -> Result<()> {
                    // A claim on a fresh log that never appended is recorded
                    // now, so a later writer still sees it.
                    let epoch = self.epoch.load(std::sync::atomic::Ordering::SeqCst);
                    if self.fresh.swap(false, std::sync::atomic::Ordering::SeqCst) && epoch > 0 {
                        return self.claim(epoch).await;
                    }
                    Ok(())
                }
            }
        };
    };
}

pub(crate) use sql_log;

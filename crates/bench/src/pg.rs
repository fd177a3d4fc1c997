//! PostgreSQL for the benchmarks: a fresh migrated database per benchmark,
//! and a statement counter fed by the server's own statement log.
//!
//! Counting: a pool opened with [`Db::counted_pool`] sets `log_statement = all`
//! and `client_min_messages = log` for its sessions (the role is a superuser
//! on the throwaway cluster). PostgreSQL then sends every statement it
//! executes back to that client as a `LOG` notice, which sqlx turns into a
//! tracing event with target `sqlx::postgres::notice`; [`StatementCounter`]
//! is the tracing layer that counts them. The count is therefore the
//! server's view (what it logged as executed), not our own bookkeeping, and
//! it needs neither `shared_preload_libraries` (pg_stat_statements) nor
//! access to the server's log file. Statement *preparation* (sqlx's
//! Parse/Describe, once per statement and connection) is not an executed
//! statement and is not logged; the lifecycle benchmark warms the pool so
//! the count is the steady state.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use korvus_store_sql::{migrate, PgPool};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer};

/// Where `cargo xtask bench` puts the throwaway cluster's URL.
pub(crate) const URL_VAR: &str = "KORVUS_TEST_DATABASE_URL";
const NOTICE_TARGET: &str = "sqlx::postgres::notice";

/// The server URL from the environment.
pub(crate) fn url() -> Result<String> {
    std::env::var(URL_VAR).with_context(|| {
        format!("{URL_VAR} is not set: run the benchmarks with `cargo xtask bench`, which starts PostgreSQL")
    })
}

/// A fresh, migrated database of its own.
#[derive(Debug)]
pub(crate) struct Db {
    admin: PgConnectOptions,
    pub(crate) name: String,
}

impl Db {
    /// Creates and migrates `korvus_bench_<uuid>`.
    pub(crate) async fn create(label: &str) -> Result<Self> {
        let admin = PgConnectOptions::from_str(&url()?).context("parsing the database URL")?;
        let name = format!("korvus_bench_{label}_{}", uuid::Uuid::now_v7().simple());
        let mut conn = PgConnection::connect_with(&admin).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        conn.close().await.ok();
        let db = Self { admin, name };
        let pool = db.pool(1).await?;
        migrate(&pool)
            .await
            .context("migrating the bench database")?;
        pool.close().await;
        Ok(db)
    }

    /// Database `name`, made by [`Db::create`] in another process of
    /// this benchmark (a child replica); dropped by its creator.
    pub(crate) fn existing(name: &str) -> Result<Self> {
        let admin = PgConnectOptions::from_str(&url()?).context("parsing the database URL")?;
        Ok(Self {
            admin,
            name: name.to_owned(),
        })
    }

    fn options(&self) -> PgConnectOptions {
        self.admin.clone().database(&self.name)
    }

    /// A pool of up to `max` connections.
    pub(crate) async fn pool(&self, max: u32) -> Result<PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(max)
            .connect_with(self.options())
            .await?)
    }

    /// A pool whose sessions log every executed statement back to this
    /// client (see the module docs).
    pub(crate) async fn counted_pool(&self, max: u32) -> Result<PgPool> {
        let options = self
            .options()
            .options([("log_statement", "all"), ("client_min_messages", "log")]);
        Ok(PgPoolOptions::new()
            .max_connections(max)
            .connect_with(options)
            .await?)
    }

    /// Drops the database.
    pub(crate) async fn drop_db(self) -> Result<()> {
        let mut conn = PgConnection::connect_with(&self.admin).await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await?;
        conn.close().await.ok();
        Ok(())
    }
}

/// Counts the statements PostgreSQL logged back to counted pools.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatementCounter {
    count: Arc<AtomicUsize>,
    texts: Arc<Mutex<Vec<String>>>,
}

impl StatementCounter {
    /// Forgets everything counted so far.
    pub(crate) fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
        self.texts.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Statements counted since the last reset.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Their text as logged (`execute sqlx_s_3: SELECT …`), shortened.
    pub(crate) fn texts(&self) -> Vec<String> {
        self.texts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Message(Option<String>);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" && self.0.is_none() {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: Subscriber> Layer<S> for StatementCounter {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Everything else (the manager's spans and events) is switched off,
        // so this subscriber costs the other benchmarks nothing.
        if meta.target() == NOTICE_TARGET {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: LayerContext<'_, S>) -> bool {
        meta.target() == NOTICE_TARGET
    }

    fn on_event(&self, event: &Event<'_>, _: LayerContext<'_, S>) {
        let mut message = Message(None);
        event.record(&mut message);
        let Some(text) = message.0 else { return };
        // `statement: …` (simple protocol) or `execute <name>: …` (extended).
        if text.starts_with("statement:") || text.starts_with("execute ") {
            self.count.fetch_add(1, Ordering::SeqCst);
            let short: String = text.chars().take(110).collect();
            self.texts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(short);
        }
    }
}

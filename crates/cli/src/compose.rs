//! The composition root: which backends a command uses, and the one place a
//! [`Manager`] is built from them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use korvus_blob::{BlobKey, BlobStore, FsBlobStore};
use korvus_blob_s3::{S3BlobStore, S3Credentials};
use korvus_log::TurnLog;
use korvus_runner::Runner;
use korvus_session::{Manager, ManagerBuilder};
use korvus_store::{CoordinatedStore, Outbox};
use korvus_store_sql::{
    migrate, open_sqlite, PgLog, PgPool, PgStore, SqliteLog, SqlitePool, SqliteStore,
};
use korvus_workspace::{GitSeeder, ScratchRoot};

use crate::Global;

/// How long connecting to PostgreSQL may take before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The backends one invocation works on, and where they keep things.
pub(crate) struct Backends {
    pub(crate) store: Arc<dyn CoordinatedStore>,
    /// The same store's webhook outbox (`serve --webhook` delivers it).
    pub(crate) outbox: Arc<dyn Outbox>,
    /// The same store's budgets (`korvus budget`; the runs' gateway).
    pub(crate) budgets: Arc<dyn korvus_store::Budgets>,
    pub(crate) logs: Arc<dyn TurnLog>,
    pub(crate) blobs: Arc<dyn BlobStore>,
    /// The data dir (absolute).
    pub(crate) data_dir: PathBuf,
    /// The scratch root (supplied: never removed): in the data dir, or
    /// where `place.rs` put it for a data dir closed to the agent user.
    pub(crate) scratch: PathBuf,
    /// The warning an existing data dir open to other users gets.
    open_dir: Option<String>,
    /// What is stored where, for humans.
    pub(crate) places: Vec<(&'static str, String)>,
    /// The lease ttl and heartbeat period of this process's manager.
    lease: (Duration, Duration),
    /// How often its runs are checkpointed at most (zero: never).
    checkpoint_interval: Duration,
    /// At most this many attempts of a revision whose owner died (0: none
    /// resumed).
    resume_orphans: u32,
    /// Its admission: run slots, the per-key cap, the pool.
    admission: (usize, Option<u32>, String),
    pools: Pools,
}

enum Pools {
    Sqlite(SqlitePool),
    Pg(PgPool),
}

/// The database's side of the backends: the store (twice: as the
/// manager's and as the webhook outbox), its turn log, its pool.
type Opened = (
    Arc<dyn CoordinatedStore>,
    Arc<dyn Outbox>,
    Arc<dyn korvus_store::Budgets>,
    Arc<dyn TurnLog>,
    Pools,
);

impl Backends {
    /// Opens the backends `global` selects and applies pending migrations:
    /// SQLite and files under the data dir by default; PostgreSQL with
    /// `--database-url`; S3 with `--s3-bucket`.
    pub(crate) async fn open(global: &Global) -> Result<Self> {
        let (data_dir, open_dir) = crate::place::data_dir(&global.data_dir)?;
        let mut places = Vec::new();

        let (store, outbox, budgets, logs, pools): Opened =
            match global.database_url.as_deref().filter(|u| !u.is_empty()) {
                None => {
                    let db = data_dir.join("korvus.db");
                    let pool = open_sqlite(&db).await.with_context(|| {
                        format!("cannot open the SQLite database {}", db.display())
                    })?;
                    migrate(&pool)
                        .await
                        .with_context(|| format!("cannot migrate {}", db.display()))?;
                    places.push((
                        "database (SQLite: rows and turn logs)",
                        db.display().to_string(),
                    ));
                    let store = Arc::new(SqliteStore::new(pool.clone()));
                    (
                        store.clone(),
                        store.clone(),
                        store,
                        Arc::new(SqliteLog::new(pool.clone())),
                        Pools::Sqlite(pool),
                    )
                }
                Some(url) => {
                    let pool = connect_pg(url).await?;
                    migrate(&pool)
                        .await
                        .with_context(|| format!("cannot migrate {}", redact(url)))?;
                    places.push(("database (PostgreSQL: rows and turn logs)", redact(url)));
                    let store = Arc::new(PgStore::new(pool.clone()));
                    (
                        store.clone(),
                        store.clone(),
                        store,
                        Arc::new(PgLog::new(pool.clone())),
                        Pools::Pg(pool),
                    )
                }
            };

        let blobs: Arc<dyn BlobStore> = match global.s3_bucket.as_deref().filter(|b| !b.is_empty())
        {
            None => {
                if global.s3_endpoint.is_some() || global.s3_prefix.is_some() {
                    bail!("--s3-endpoint and --s3-prefix need --s3-bucket");
                }
                let root = data_dir.join("blobs");
                let fs = FsBlobStore::open(&root).with_context(|| {
                    format!("cannot open the blob directory {}", root.display())
                })?;
                places.push(("blobs (files)", root.display().to_string()));
                Arc::new(fs)
            }
            Some(bucket) => {
                let mut builder = S3BlobStore::builder(bucket, S3Credentials::default_chain())
                    .force_path_style(global.s3_path_style);
                if let Some(endpoint) = &global.s3_endpoint {
                    builder = builder.endpoint_url(endpoint);
                }
                if let Some(region) = &global.s3_region {
                    builder = builder.region(region);
                }
                let mut where_ = format!("s3://{bucket}");
                if let Some(prefix) = &global.s3_prefix {
                    let key = BlobKey::new(prefix.as_str())
                        .with_context(|| format!("invalid --s3-prefix {prefix:?}"))?;
                    builder = builder.key_prefix(key);
                    where_.push('/');
                    where_.push_str(prefix);
                }
                if let Some(endpoint) = &global.s3_endpoint {
                    where_.push_str(&format!(" at {endpoint}"));
                }
                let s3 = builder.build().await.context("cannot configure S3")?;
                places.push(("blobs (S3)", where_));
                Arc::new(s3)
            }
        };

        let scratch = crate::place::scratch_root(&data_dir)?;
        places.push((
            "scratch dirs (removed after each run)",
            scratch.display().to_string(),
        ));
        Ok(Self {
            store,
            outbox,
            budgets,
            logs,
            blobs,
            data_dir,
            scratch,
            places,
            open_dir,
            lease: (
                Duration::from_secs_f64(global.lease_ttl),
                Duration::from_secs_f64(global.heartbeat),
            ),
            checkpoint_interval: Duration::from_secs_f64(global.checkpoint_interval),
            resume_orphans: global.resume_orphans,
            admission: (
                global.max_running as usize,
                global.max_running_per_key,
                global.pool.clone(),
            ),
            pools,
        })
    }

    /// Opens the backends, as [`open`](Backends::open), and checks that
    /// each does what a run needs (`Manager::check`: the database is
    /// migrated and writable, the blob store accepts a write, the scratch
    /// root a new directory) before the command writes any row — the
    /// commands that run agents use it, so a wrong bucket or an unwritable
    /// blob dir is named before an agent works for nothing. The pools are
    /// closed when the check fails.
    pub(crate) async fn open_checked(global: &Global) -> Result<Self> {
        let backends = Self::open(global).await?;
        if let Some(warning) = &backends.open_dir {
            eprintln!("korvus: warning: {warning}");
        }
        let manager = backends.tool_manager();
        let checked = manager.check().await;
        manager.stop().await;
        match checked {
            Ok(()) => Ok(backends),
            Err(korvus_session::SessionError::NotReady { part, reason }) => {
                let label = match part {
                    "blob store" => "blobs",
                    "store" => "database",
                    _ => "scratch",
                };
                let place = backends
                    .places
                    .iter()
                    .find(|(l, _)| l.starts_with(label))
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default();
                backends.close().await;
                bail!("the {part} {place} is not usable: {reason}")
            }
            Err(e) => {
                backends.close().await;
                Err(e).context("cannot check the backends")
            }
        }
    }

    /// Where the rows are (the SQLite file or the redacted PostgreSQL
    /// URL), for messages that say where something was not found.
    pub(crate) fn place(&self) -> &str {
        self.places.first().map_or("", |(_, place)| place.as_str())
    }

    /// The one place a [`Manager`] is composed: these backends, a git
    /// seeder reading each incident's pinned repository, the scratch root
    /// under the data dir, and `runner`.
    pub(crate) fn manager(
        &self,
        runner: korvus_command::CommandRunner,
        run_timeout: Option<Duration>,
        described: Option<String>,
    ) -> Manager {
        // What a revision may store follows the run's scratch limit: a
        // scratch dir that holds more than its blocks (sparse files, hard
        // links, a fast writer) stores no more than the limit either.
        let mut persist = korvus_harvest::PersistConfig::default();
        if let Some(limit) = runner.run_limits().scratch_limit() {
            persist.max_stored_bytes = limit;
        }
        // The runs' model calls and wall time count against the session's
        // and incident's budgets (`korvus budget`); the CLI has no price
        // table, so no cost is counted.
        let runner = runner.budgets(Arc::clone(&self.budgets), korvus_store::PriceTable::new());
        let mut builder = self
            .builder(Arc::new(runner), run_timeout)
            .persist_config(persist);
        // Remembered on each session it creates (`remember.rs`).
        if let Some(described) = described {
            builder = builder.runner_description(described);
        }
        builder.build()
    }

    /// A manager that runs nothing: for commands that cancel, reap or
    /// inspect. It never claims queued sessions (it would fail them), and
    /// settles an orphan rather than resuming it.
    pub(crate) fn tool_manager(&self) -> Manager {
        self.tool_manager_resuming(false)
    }

    /// [`tool_manager`](Self::tool_manager), sending orphans back to their
    /// pool to be resumed when `resume` (`korvus reap --apply --resume`).
    pub(crate) fn tool_manager_resuming(&self, resume: bool) -> Manager {
        let attempts = if resume { self.resume_orphans } else { 0 };
        self.builder(Arc::new(crate::session::NoRuns), None)
            .claim_queued(false)
            .resume_orphans(attempts, Duration::from_secs(1))
            .build()
    }

    fn builder(&self, runner: Arc<dyn Runner>, run_timeout: Option<Duration>) -> ManagerBuilder {
        let seeder = GitSeeder::default();
        let trees = seeder.trees().to_vec();
        let mut builder = Manager::builder(Arc::clone(&self.store), runner)
            .budgets(Arc::clone(&self.budgets))
            .turn_log(Arc::clone(&self.logs))
            .blob_store(Arc::clone(&self.blobs))
            .scratch_root(ScratchRoot::supplied(&self.scratch))
            .seeder(Arc::new(seeder), trees)
            .lease(self.lease.0, self.lease.1)
            .checkpoint_interval(self.checkpoint_interval)
            .resume_orphans(self.resume_orphans, Duration::from_secs(1))
            .max_running(self.admission.0)
            .pool(self.admission.2.clone());
        if let Some(cap) = self.admission.1 {
            builder = builder.max_running_per_key(cap);
        }
        if let Some(timeout) = run_timeout {
            builder = builder.run_timeout(timeout);
        }
        builder
    }

    /// Closes the database pools (SQLite checkpoints its log).
    pub(crate) async fn close(self) {
        match self.pools {
            Pools::Sqlite(pool) => pool.close().await,
            Pools::Pg(pool) => pool.close().await,
        }
    }
}

/// Connects to PostgreSQL, failing fast (and in one line) when the server
/// cannot be reached: sqlx itself retries refused connections until its
/// acquire timeout.
async fn connect_pg(url: &str) -> Result<PgPool> {
    let shown = redact(url);
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        bail!("unsupported --database-url {shown}: expected postgres://…");
    }
    if let Some((host, port)) = host_port(url) {
        let addr = format!("{host}:{port}");
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(
                    anyhow::Error::new(e).context(format!("cannot reach PostgreSQL at {addr}"))
                )
            }
            Err(_) => {
                bail!("cannot reach PostgreSQL at {addr}: no answer within {CONNECT_TIMEOUT:?}")
            }
        }
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, PgPool::connect(url)).await {
        Ok(Ok(pool)) => Ok(pool),
        Ok(Err(e)) => Err(anyhow::Error::new(e).context(format!("cannot connect to {shown}"))),
        Err(_) => bail!("cannot connect to {shown}: no connection within {CONNECT_TIMEOUT:?}"),
    }
}

/// `host` and `port` of a single-host `postgres://` URL; `None` when there
/// is none to check (unix socket, several hosts).
fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if hostport.is_empty() || hostport.contains(',') {
        return None;
    }
    if let Some(v6) = hostport.strip_prefix('[') {
        let (host, tail) = v6.split_once(']')?;
        let port = tail
            .strip_prefix(':')
            .map_or(Some(5432), |p| p.parse().ok())?;
        return Some((format!("[{host}]"), port));
    }
    match hostport.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((hostport.to_owned(), 5432)),
    }
}

/// The URL with its password replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// `path` shown relative to the current directory when it is under it.
pub(crate) fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(|p| p.display().to_string()))
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/korvus?sslmode=disable"),
            "postgres://app:***@db:5432/korvus?sslmode=disable"
        );
        assert_eq!(
            redact("postgres://app@db/korvus"),
            "postgres://app@db/korvus"
        );
        assert_eq!(redact("postgres:///korvus"), "postgres:///korvus");
    }

    #[test]
    fn host_and_port_are_found() {
        assert_eq!(
            host_port("postgres://u:p@127.0.0.1:6543/x"),
            Some(("127.0.0.1".into(), 6543))
        );
        assert_eq!(host_port("postgres://db/x"), Some(("db".into(), 5432)));
        assert_eq!(host_port("postgres://[::1]:7/x"), Some(("[::1]".into(), 7)));
        assert_eq!(host_port("postgres:///x?host=/run/pg"), None);
        assert_eq!(host_port("postgres://a,b/x"), None);
    }
}

//! The real Codex and Claude Code binaries as korvus sessions: each is
//! driven by korvus's scripted model server on loopback through one tool
//! call that writes `report.md`, through the `Manager` on SQLite and
//! files, under the default sandbox and limits, as an agent user.
//!
//! `cargo xtask test` installs both from the npm registry at pinned
//! versions and exports `KORVUS_CODEX_BIN` / `KORVUS_CLAUDE_BIN`; there
//! these tests are required.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::FsBlobStore;
use korvus_command::{AgentUser, CommandRunner, ModelEndpoint, Network, Preset, Roots};
use korvus_log::{Access, Event, EventKind, LogId, Role, TurnLog};
use korvus_model_stub::{Api, Mode, Script, StubServer, TestCa, REPLY, REPORT_COMMAND};
use korvus_session::{CreateSession, Manager};
use korvus_store::{ArtifactKind, CoordinatedStore, NewIncident, Session, SessionStatus};
use korvus_store_sql::testing::SqliteDb;
use korvus_store_sql::{SqliteLog, SqliteStore};
use korvus_workspace::ScratchRoot;

/// The agent binary `var` names, or `None` (a loud skip) outside
/// `cargo xtask test`.
pub(crate) fn agent_bin(var: &str) -> Option<PathBuf> {
    let required = std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() == Ok("1");
    match std::env::var_os(var) {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            let why = std::env::var("KORVUS_AGENTS_UNAVAILABLE")
                .unwrap_or_else(|_| format!("{var} is not set"));
            assert!(
                !required,
                "the real-agent tests need {var} ({why}); `cargo xtask test` installs the agents"
            );
            eprintln!("SKIPPED: the real-agent tests need {var} ({why}); run `cargo xtask test`");
            None
        }
    }
}

/// A manager on SQLite and files running `runner` as `nobody` (korvus's
/// default agent user under root; Claude Code refuses to skip its
/// permission prompts as root).
pub(crate) struct Rig {
    pub(crate) manager: Manager,
    pub(crate) store: Arc<SqliteStore>,
    pub(crate) logs: Arc<SqliteLog>,
    _db: SqliteDb,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Rig {
    pub(crate) async fn new(runner: CommandRunner) -> Self {
        Self::with_scratch(runner, tempfile::tempdir().unwrap()).await
    }

    /// A rig whose scratch root is `scratch`.
    pub(crate) async fn with_scratch(runner: CommandRunner, scratch: tempfile::TempDir) -> Self {
        let db = SqliteDb::create().await;
        let store = Arc::new(SqliteStore::new(db.pool().clone()));
        let logs = Arc::new(SqliteLog::new(db.pool().clone()));
        let blobs = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            // The agent user must reach its scratch dir.
            std::fs::set_permissions(
                scratch.path(),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }
        let manager = Self::manager_on(&store, &logs, (&scratch, &blobs), runner);
        Self {
            manager,
            store,
            logs,
            _db: db,
            _dirs: (scratch, blobs),
        }
    }

    /// The scratch root.
    pub(crate) fn scratch(&self) -> &std::path::Path {
        self._dirs.0.path()
    }

    /// Another manager of the same pool on the same database, blob store
    /// and scratch root: a second replica on this host.
    pub(crate) fn replica(&self, runner: CommandRunner) -> Manager {
        Self::manager_on(
            &self.store,
            &self.logs,
            (&self._dirs.0, &self._dirs.1),
            runner,
        )
    }

    fn manager_on(
        store: &Arc<SqliteStore>,
        logs: &Arc<SqliteLog>,
        (scratch, blobs): (&tempfile::TempDir, &tempfile::TempDir),
        runner: CommandRunner,
    ) -> Manager {
        let runner = if nix::unistd::geteuid().is_root() {
            runner.run_as(AgentUser::lookup("nobody").expect("user nobody"))
        } else {
            runner
        };
        // Budgets in the same store, as the CLI composes them: a run whose
        // session has none pays one read per model call.
        let budgets = Arc::clone(store) as Arc<dyn korvus_store::Budgets>;
        let runner = runner.budgets(Arc::clone(&budgets), korvus_store::PriceTable::new());
        Manager::builder(
            Arc::clone(store) as Arc<dyn CoordinatedStore>,
            Arc::new(runner),
        )
        .budgets(budgets)
        .blob_store(Arc::new(FsBlobStore::open(blobs.path()).unwrap()))
        .turn_log(Arc::clone(logs) as Arc<dyn TurnLog>)
        .scratch_root(ScratchRoot::supplied(scratch.path()))
        .build()
    }

    async fn run(&self, prompt: &str) -> Session {
        let session = self.start(prompt).await;
        self.settled(&session).await
    }

    /// Creates a session in a new incident; does not wait for it.
    async fn start(&self, prompt: &str) -> Session {
        let incident = korvus_store::Store::create_incident(
            &*self.store,
            NewIncident {
                title: "db-1 disk full".into(),
                workspace: None,
            },
        )
        .await
        .unwrap();
        self.manager
            .create(CreateSession::new(incident.id, prompt))
            .await
            .unwrap()
    }

    pub(crate) async fn settled(&self, session: &Session) -> Session {
        match self
            .manager
            .await_settled(session.id, Duration::from_secs(120))
            .await
        {
            Ok(row) => row,
            Err(e) => panic!("{e}: {:#?}", self.events(session).await),
        }
    }

    pub(crate) async fn events(&self, session: &Session) -> Vec<Event> {
        let log = self
            .logs
            .open(LogId::from_uuid(session.id.as_uuid()), Access::Read)
            .await
            .unwrap();
        log.read(0, None).await.unwrap()
    }
}

/// The run went through the stub's one tool call: a turn, the command
/// (ok), the reply, the usage of the stub's two responses.
async fn assert_one_scripted_turn(rig: &Rig, row: &Session, tool: &str) {
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some("completed"));
    let events = rig.events(row).await;
    let shown = || format!("{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ToolCall { tool: t, .. } if t == tool)),
        "a {tool} call: {}",
        shown()
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ToolResult { ok: true, .. })),
        "its result: {}",
        shown()
    );
    assert!(
        events.iter().any(|e| e.kind
            == EventKind::Message {
                role: Role::Assistant,
                text: REPLY.into()
            }),
        "the reply: {}",
        shown()
    );
    // Two model responses of 100 in / 10 out each.
    let c = &row.counters;
    assert_eq!(
        (c.turns, c.tool_calls, c.input_tokens, c.output_tokens),
        (1, 1, 200, 20),
        "{row:?}"
    );
    let reports = korvus_store::StoreExt::all_reports(&*rig.store, row.id)
        .await
        .unwrap();
    assert!(reports[0].markdown_key.is_some(), "{reports:?}");
}

/// The agent's kept state is its thread and korvus's record of it, as
/// `agent_state` artifacts; nothing else of its home (no `auth.json`, no
/// credentials) was stored.
async fn assert_only_the_thread_kept(rig: &Rig, row: &Session) {
    let artifacts = korvus_store::StoreExt::all_session_artifacts(&*rig.store, row.id)
        .await
        .unwrap();
    let mut state: Vec<&str> = artifacts
        .iter()
        .filter(|a| a.kind == ArtifactKind::AgentState)
        .map(|a| a.path.as_str())
        .collect();
    state.sort_unstable();
    state.dedup();
    assert_eq!(
        state,
        vec![".korvus/agent/state.json", ".korvus/agent/thread.jsonl"],
        "{artifacts:#?}"
    );
    for a in &artifacts {
        assert!(
            !a.path.contains(".codex") && !a.path.contains(".claude") && !a.path.contains("auth"),
            "{}",
            a.path
        );
    }
}

async fn real_agent_session(preset: Preset, var: &str, api: Api, tool: &str) {
    real_agent_session_in(preset, var, api, tool, tempfile::tempdir().unwrap()).await;
}

/// The real key the scripted upstream expects, which only korvus holds.
const REAL_KEY: &str = "sk-korvus-real-7f3a9c2e51d4";
/// The embedding process's variable korvus reads it from.
const KEY_VAR: &str = "KORVUS_E2E_MODEL_KEY";

/// Files under `root` (recursively) holding `needle`.
fn files_holding(root: &std::path::Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() => {
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        found.push(path);
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// While `done` is unset: every process whose environment names the
/// session (the agent and everything it starts), read from
/// `/proc/<pid>/environ` as root, and the scratch root's files; returns
/// how many agent processes were seen and what held the real key.
async fn watch_for_the_key(
    session: String,
    scratch: PathBuf,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> (usize, Vec<String>) {
    let marker = format!("KORVUS_SESSION_ID={session}");
    let mut seen = std::collections::HashSet::new();
    let mut leaks = Vec::new();
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            let text = String::from_utf8_lossy(&environ);
            if !text.split('\0').any(|v| v == marker) {
                continue;
            }
            seen.insert(entry.file_name());
            if text.contains(REAL_KEY) || text.contains(KEY_VAR) {
                leaks.push(format!("/proc/{:?}/environ", entry.file_name()));
            }
        }
        for path in files_holding(&scratch, REAL_KEY.as_bytes()) {
            leaks.push(path.display().to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (seen.len(), leaks)
}

/// A scripted upstream over TLS (`ca` signs its certificate, the gateway
/// trusts it) and `preset`'s runner reaching it only through korvus's
/// model gateway, the real key in korvus's environment source.
pub(crate) async fn through_the_gateway(
    preset: Preset,
    bin: &std::path::Path,
    script: Script,
    ca: &TestCa,
) -> (StubServer, CommandRunner) {
    let stub = StubServer::start_tls(script, ca).await.unwrap();
    let endpoint = ModelEndpoint::new(match preset {
        Preset::Codex => stub.openai_base_url(),
        _ => stub.base_url(),
    })
    .with_api_key_var(KEY_VAR)
    .trusting(Roots::only().with(ca.ca_der().clone()));
    let runner = preset
        .runner(bin, Some(&endpoint))
        .env_source(std::env::vars_os().chain([(KEY_VAR.into(), REAL_KEY.into())]));
    (stub, runner)
}

/// [`real_agent_session`] with `scratch` as the scratch root: the agent
/// reaches the scripted upstream (over TLS, with a test authority the
/// gateway trusts) only through korvus's model gateway.
async fn real_agent_session_in(
    preset: Preset,
    var: &str,
    api: Api,
    tool: &str,
    scratch: tempfile::TempDir,
) {
    let Some(bin) = agent_bin(var) else {
        return;
    };
    assert!(
        nix::unistd::geteuid().is_root(),
        "the key is looked for in the agent's /proc environ as root (cargo xtask test)"
    );
    let ca = TestCa::new().unwrap();
    // The command sleeps a little: the agent's processes are watched
    // while it runs.
    let script = Script {
        command: format!("sleep 1 && {REPORT_COMMAND}"),
        ..Script::default()
    };
    let (stub, runner) = through_the_gateway(preset, &bin, script, &ca).await;
    // Served on the agent's own loopback: no egress at all.
    assert_eq!(runner.network_policy(), &Network::none());
    let rig = Rig::with_scratch(runner, scratch).await;
    let session = rig.start("Why is db-1's disk full?").await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn(watch_for_the_key(
        session.id.to_string(),
        rig.scratch().to_path_buf(),
        Arc::clone(&done),
    ));
    let row = rig.settled(&session).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (processes, leaks) = watcher.await.unwrap();
    assert!(
        processes >= 2,
        "the agent and its command were watched: {processes}"
    );
    assert!(
        leaks.is_empty(),
        "the real key reached the agent: {leaks:?}"
    );
    assert_one_scripted_turn(&rig, &row, tool).await;
    let events = rig.events(&row).await;
    let metered = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::MeteredUsage {
                    input_tokens: 100,
                    output_tokens: 10,
                    ..
                }
            )
        })
        .count();
    assert_eq!(metered, 2, "both answers metered: {events:#?}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(requests.iter().all(|r| r.api == api));
    assert!(requests[0].mentions("Why is db-1's disk full?"));
    for r in &requests {
        let key = r.key.as_deref().unwrap_or_default();
        assert!(
            key.ends_with(REAL_KEY),
            "the upstream saw the real key: {key:?}"
        );
    }

    // A reopen resumes the agent's own thread: the model's next request
    // carries the first turn (the first prompt, the command's output), and
    // revision 2 counts only its own usage; turn numbers do not repeat.
    rig.manager.reopen(row.id, "And the WAL?").await.unwrap();
    let row = rig.settled(&row).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(row.revision, 2);
    let events = rig.events(&row).await;
    let turns: Vec<u64> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TurnStart { turn } => Some(turn),
            _ => None,
        })
        .collect();
    assert_eq!(turns, vec![1, 2]);
    assert!(
        events.iter().any(|e| matches!(&e.kind,
            EventKind::Note { text } if text.starts_with(&format!("resuming {} thread ", preset.name())))),
        "{events:#?}"
    );
    let requests = stub.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    assert!(requests[2].mentions("And the WAL?"));
    assert!(
        requests[2].mentions("Why is db-1's disk full?"),
        "the resumed agent sent its first turn back: {:#?}",
        requests[2]
    );
    let reports = korvus_store::StoreExt::all_reports(&*rig.store, row.id)
        .await
        .unwrap();
    let c = &reports[1].counters;
    assert_eq!(
        (c.turns, c.tool_calls, c.input_tokens, c.output_tokens),
        (1, 1, 200, 20),
        "revision 2 counts its own usage only"
    );
    assert_only_the_thread_kept(&rig, &row).await;
    assert!(
        stub.requests()
            .iter()
            .all(|r| r.key.as_deref().is_some_and(|k| k.ends_with(REAL_KEY))),
        "every call carried the real key upstream"
    );
    // Nothing korvus stored holds the key: not a blob, not an event.
    let stored = files_holding(rig._dirs.1.path(), REAL_KEY.as_bytes());
    assert!(stored.is_empty(), "blobs holding the real key: {stored:?}");
    let log = serde_json::to_string(&rig.events(&row).await).unwrap();
    assert!(!log.contains(REAL_KEY), "the turn log holds the real key");
    rig.manager.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_runs_a_session_through_the_stub() {
    real_agent_session(Preset::Codex, "KORVUS_CODEX_BIN", Api::Responses, "command").await;
}

/// A data dir of about 190 characters: the scratch dir's path is over the
/// 200 characters Claude Code keeps of a projects folder name, so the kept
/// thread goes back under the cut, hashed name it looks for, and the
/// reopen resumes natively.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_code_resumes_natively_under_a_long_data_dir() {
    let scratch = tempfile::Builder::new()
        .prefix(&"d".repeat(180))
        .tempdir()
        .unwrap();
    assert!(scratch.path().as_os_str().len() >= 185, "{scratch:?}");
    real_agent_session_in(
        Preset::ClaudeCode,
        "KORVUS_CLAUDE_BIN",
        Api::Messages,
        "Bash",
        scratch,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_claude_code_runs_a_session_through_the_stub() {
    real_agent_session(
        Preset::ClaudeCode,
        "KORVUS_CLAUDE_BIN",
        Api::Messages,
        "Bash",
    )
    .await;
}

/// A scripted model server on 127.0.0.1 and the Codex endpoint pointing at
/// it (no key); the server lives as long as the returned handle.
async fn codex_stub(script: Script) -> (StubServer, ModelEndpoint) {
    let stub = StubServer::start(script).await.unwrap();
    let endpoint = ModelEndpoint::new(stub.openai_base_url());
    (stub, endpoint)
}

/// A model endpoint that fails every request, or never answers: the
/// session ends with a specific exit reason within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_against_a_failing_or_silent_endpoint_ends_in_its_bound() {
    let Some(bin) = agent_bin("KORVUS_CODEX_BIN") else {
        return;
    };
    // Codex retries a failing endpoint five times with growing pauses
    // (about 25 s in all, pauses of up to 6 s without a line), so only the
    // silent endpoint gets a short stall limit.
    for (mode, reason, stall, bound) in [
        (
            Mode::ServerError,
            "agent_error",
            60,
            Duration::from_secs(90),
        ),
        (Mode::Silent, "stalled", 5, Duration::from_secs(60)),
    ] {
        let (_stub, endpoint) = codex_stub(Script {
            mode,
            ..Script::default()
        })
        .await;
        let limits = korvus_command::Limits::default().stall(Some(Duration::from_secs(stall)));
        let rig = Rig::new(Preset::Codex.runner(&bin, Some(&endpoint)).limits(limits)).await;
        let started = std::time::Instant::now();
        let row = rig.run("x").await;
        assert_eq!(row.status, SessionStatus::Failed, "{mode:?}: {row:?}");
        assert_eq!(row.exit_reason.as_deref(), Some(reason), "{mode:?}");
        assert!(
            started.elapsed() < bound,
            "{mode:?}: {:?}",
            started.elapsed()
        );
        rig.manager.stop().await;
    }
}

/// Under its preset's `allow([the stub])` policy the real Codex reaches
/// the stub, and the command the model asks for — a request to another
/// port of the host's loopback — is refused by korvus's proxy and noted;
/// the port never sees a connection, and the namespace's IPv4 routing
/// table (read by the command, not probed) is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_under_allow_reaches_only_its_endpoint() {
    let Some(bin) = agent_bin("KORVUS_CODEX_BIN") else {
        return;
    };
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let port = other.local_addr().unwrap().port();
    let (_stub, endpoint) = codex_stub(Script {
        command: format!(
            "echo probe=$(curl -s -m 10 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/); \
             echo routes=$(tail -n +2 /proc/net/route | wc -l); printf '# R\\n' > report.md"
        ),
        ..Script::default()
    })
    .await;
    let rig = Rig::new(Preset::Codex.runner(&bin, Some(&endpoint))).await;
    let row = rig.run("Probe the network").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let events = rig.events(&row).await;
    let refusal = format!("egress refused: GET 127.0.0.1:{port} is not allowed");
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Note { text } if text.starts_with(&refusal))),
        "{events:#?}"
    );
    let output = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult { output, .. } => Some(output.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no command result: {events:#?}"));
    assert!(
        output.contains("probe=403"),
        "the proxy's refusal: {output}"
    );
    assert!(output.contains("routes=0"), "no IPv4 route: {output}");
    assert!(
        other.accept().is_err(),
        "nothing reached the other port of the host"
    );
    rig.manager.stop().await;
}

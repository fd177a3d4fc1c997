//! The SQL snapshot: every statement each engine runs, rendered to
//! `sql/postgres.sql` and `sql/sqlite.sql` and compared with the
//! checked-in files, the way rust-analyzer's expect tests compare output.
//! A statement changed in the code without its snapshot fails here; run
//! with `KORVUS_UPDATE_SQL=1` to rewrite the files, then review the diff.
//!
//! It also checks that no statement escapes the snapshot: every
//! `sqlx::query*` call and transaction start in `src/` (but the test
//! fixtures of `testing.rs`) must take a named statement, never a literal
//! or a `format!` written where it runs; and that no statement is read
//! before it completed (`completed.rs`).

use std::path::{Path, PathBuf};

use korvus_store::SessionStatus;

use crate::dialect::StoreDialect;
use crate::{postgres, sql, sqlite, PgStore, SqliteStore};

/// The statements of PostgreSQL, by name.
fn postgres_statements() -> Vec<(String, String)> {
    let mut out = named(sql::SHARED, "shared");
    out.extend(named(postgres::POSTGRES, "postgres"));
    out.push((
        "INSERT_SESSION (postgres dialect)".into(),
        <PgStore as StoreDialect>::INSERT_SESSION.into(),
    ));
    for (name, text) in PgStore::statements().all() {
        out.push((format!("{name} (built from the dialect)"), text.to_owned()));
    }
    for (name, text) in PgStore::outbox_statements().all() {
        out.push((format!("{name} (built from the dialect)"), text.to_owned()));
    }
    for (name, text) in crate::budget::ALL {
        out.push((format!("{name} (budgets)"), text.to_owned()));
    }
    out
}

/// The statements of SQLite, by name; a batch statement rendered for two
/// rows.
fn sqlite_statements() -> Vec<(String, String)> {
    let mut out = named(sql::SHARED, "shared");
    out.extend(named(sqlite::SQLITE, "sqlite"));
    out.push((
        "INSERT_SESSION (sqlite dialect)".into(),
        <SqliteStore as StoreDialect>::INSERT_SESSION.into(),
    ));
    for (name, text) in SqliteStore::statements().all() {
        out.push((format!("{name} (built from the dialect)"), text.to_owned()));
    }
    for (name, text) in SqliteStore::outbox_statements().all() {
        out.push((format!("{name} (built from the dialect)"), text.to_owned()));
    }
    for (name, text) in crate::budget::ALL {
        out.push((format!("{name} (budgets)"), text.to_owned()));
    }
    let built = [
        (
            "insert_context_refs_sql",
            sqlite::insert_context_refs_sql(2),
        ),
        ("insert_artifacts_sql", sqlite::insert_artifacts_sql(2)),
        ("artifacts_by_id_sql", sqlite::artifacts_by_id_sql(2)),
        ("append_events_sql", sqlite::append_events_sql(0, 2)),
    ];
    for (name, text) in built {
        out.push((format!("{name} (built per batch; shown for 2 rows)"), text));
    }
    out
}

fn named(list: &[(&str, &str)], whose: &str) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, s)| (format!("{n} ({whose})"), (*s).to_owned()))
        .collect()
}

/// Breaks a statement before its clauses, outside parentheses, one
/// clause per line, so a reader (and a diff) sees its shape.
fn layout(statement: &str) -> String {
    const CLAUSES: [&str; 13] = [
        "WITH ",
        "SELECT ",
        "INSERT INTO ",
        "UPDATE ",
        "DELETE ",
        "SET ",
        "FROM ",
        "WHERE ",
        "VALUES ",
        "ON CONFLICT ",
        "RETURNING ",
        "ORDER BY ",
        "LIMIT ",
    ];
    let flat = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < flat.len() {
        let rest = &flat[i..];
        if depth == 0 && !out.is_empty() && out.ends_with(' ') {
            if let Some(c) = CLAUSES.iter().find(|c| rest.starts_with(**c)) {
                out.pop();
                out.push('\n');
                out.push_str(c);
                i += c.len();
                continue;
            }
        }
        let ch = rest.chars().next().expect("in bounds");
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn render(engine: &str, statements: &[(String, String)]) -> String {
    let mut out = format!(
        "-- Every statement korvus-store-sql runs on {engine}, rendered by the\n\
         -- snapshot test (src/snapshot.rs). Do not edit: change the code, then\n\
         -- run `KORVUS_UPDATE_SQL=1 cargo test -p korvus-store-sql --lib snapshot`.\n"
    );
    for (name, text) in statements {
        out.push_str(&format!("\n-- {name}\n{};\n", layout(text)));
    }
    out
}

fn check(file: &str, rendered: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql").join(file);
    if std::env::var_os("KORVUS_UPDATE_SQL").is_some() {
        std::fs::write(&path, rendered).expect("snapshot written");
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    if stored != rendered {
        let first = stored
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| stored.lines().count().min(rendered.lines().count()));
        panic!(
            "{} differs from the statements in the code (first at line {}): \
             run with KORVUS_UPDATE_SQL=1 to rewrite it and review the diff",
            path.display(),
            first + 1
        );
    }
}

#[test]
fn postgres_statements_match_their_snapshot() {
    check(
        "postgres.sql",
        &render("PostgreSQL", &postgres_statements()),
    );
}

#[test]
fn sqlite_statements_match_their_snapshot() {
    check("sqlite.sql", &render("SQLite", &sqlite_statements()));
}

#[test]
fn a_changed_statement_fails_the_snapshot() {
    let mut statements = sqlite_statements();
    statements[0].1.push_str(" AND 1 = 1");
    let rendered = render("SQLite", &statements);
    let stored =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/sqlite.sql"))
            .expect("the snapshot is checked in");
    assert_ne!(stored, rendered, "an edit must show up in the snapshot");
}

#[test]
fn the_terminal_statuses_are_bound_not_written() {
    // The reopen statement takes the terminal statuses as binds: their
    // number is part of the snapshot, their names are not.
    let reopen = PgStore::statements().all()[0].1.to_owned();
    assert!(reopen.contains(&format!("${}", 4 + SessionStatus::TERMINAL.len())));
}

/// Every Rust file of `src/`, but the test fixtures.
fn sources() -> Vec<(PathBuf, String)> {
    sources_but("testing.rs")
}

/// Every Rust file of `src/` but `skip`.
fn sources_but(skip: &str) -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("src/") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.extension().is_some_and(|e| e == "rs") && name != skip {
            out.push((
                path.clone(),
                std::fs::read_to_string(&path).expect("readable"),
            ));
        }
    }
    out
}

#[test]
fn every_statement_is_named_where_it_runs() {
    let calls = [
        "sqlx::query(",
        "sqlx::query_as(",
        "sqlx::query_scalar(",
        "sqlx::query_as::<",
        "begin_with(",
    ];
    let mut inline = Vec::new();
    for (path, text) in sources() {
        if path.ends_with("snapshot.rs") {
            continue;
        }
        for call in calls {
            for (at, _) in text.match_indices(call) {
                let mut rest = &text[at + call.len()..];
                if call.ends_with('<') {
                    // Past the turbofish to the argument.
                    rest = rest.find(">(").map_or("", |i| &rest[i + 2..]);
                }
                let arg = rest.trim_start();
                if arg.starts_with('"')
                    || arg.starts_with("concat!")
                    || arg.starts_with("format!")
                    || arg.starts_with("&format!")
                {
                    let line = text[..at].lines().count() + 1;
                    inline.push(format!("{}:{line}", path.display()));
                }
            }
        }
    }
    assert!(
        inline.is_empty(),
        "statements written where they run (name them in sql.rs or the engine's statements! list): {inline:?}"
    );
}

/// Every statement is read to its end (`completed.rs`): sqlx's
/// `fetch_optional` and `fetch_one` stop at the first row, and on SQLite
/// the failed commit of a write run so is never reported. The fixtures of
/// `testing.rs` keep the rule too; only this file names the two calls.
#[test]
fn no_statement_is_read_before_it_completed() {
    let mut early = Vec::new();
    for (path, text) in sources_but("snapshot.rs") {
        for call in [".fetch_optional(", ".fetch_one("] {
            for (at, _) in text.match_indices(call) {
                let line = text[..at].lines().count() + 1;
                early.push(format!("{}:{line}", path.display()));
            }
        }
    }
    assert!(
        early.is_empty(),
        "statements read before they completed (use `Completed::fetch_optional_completed` \
         or `fetch_one_completed`, or `fetch_all`): {early:?}"
    );
}

#[test]
fn every_batch_builder_is_in_the_snapshot() {
    let rendered = render("SQLite", &sqlite_statements());
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sqlite.rs"))
        .expect("sqlite.rs");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("pub(crate) fn ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or("");
        if name.ends_with("_sql") {
            assert!(
                rendered.contains(&format!("-- {name} ")),
                "{name} builds a statement the snapshot does not render"
            );
        }
    }
}

/// The condition every fenced write uses names the model's own values, so
/// a renamed status or exit reason cannot leave the SQL behind.
#[test]
fn the_active_condition_names_the_models_values() {
    let condition = crate::rows::active!();
    assert!(condition.contains(&format!("status = '{}'", SessionStatus::Running.as_str())));
    let listed = korvus_store::exit_reason::IDLE
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(crate::rows::idle_reasons!(), format!("({listed})"));
    assert!(condition.contains(&format!("NOT IN ({listed})")));
}

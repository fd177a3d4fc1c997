//! `run` + `reopen` + `show` + `export` against PostgreSQL and S3 (moto),
//! each test on a database and a bucket of its own. Under `cargo xtask
//! test` (`KORVUS_REQUIRE_SERVICES=1`) missing services fail the test.

use std::process::Command;

use korvus_blob_s3::{S3BlobStore, S3Credentials};
use sqlx::{Connection, PgConnection};

use crate::support::{korvus, ok, script, session_id};

const ACCESS_KEY_ID: &str = "AKIDKORVUSCLITEST";
const SECRET_ACCESS_KEY: &str = "korvus-cli-secret";

/// `(database url, s3 endpoint)`, or `None` (said why) when they may be skipped.
fn services() -> Option<(String, String)> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("KORVUS_TEST_DATABASE_URL"),
        get("KORVUS_TEST_S3_ENDPOINT"),
    ) {
        (Some(db), Some(s3)) => Some((db, s3)),
        _ => {
            assert!(
                std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "KORVUS_TEST_DATABASE_URL and KORVUS_TEST_S3_ENDPOINT must be set when \
                 KORVUS_REQUIRE_SERVICES=1: `cargo xtask test` starts PostgreSQL and moto"
            );
            eprintln!(
                "skipped: KORVUS_TEST_DATABASE_URL / KORVUS_TEST_S3_ENDPOINT not set; \
                 `cargo xtask test -p korvus-cli` starts the services"
            );
            None
        }
    }
}

/// A fresh database on the test server; returns its URL.
pub(crate) async fn create_database(admin: &str, name: &str) -> String {
    let mut conn = PgConnection::connect(admin)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create the test database");
    conn.close().await.ok();
    let base = admin.split('?').next().unwrap_or(admin);
    let (server, _) = base.rsplit_once('/').expect("a database in the URL");
    format!("{server}/{name}")
}

/// Runs `body` (blocking: it spawns `korvus` processes) with the URL of a
/// database of its own on the test server, named `<prefix>_<uuid>`, and
/// drops it afterwards, also when `body` panics (the panic is passed on).
/// Without `KORVUS_TEST_DATABASE_URL` it fails under `cargo xtask test`
/// (`KORVUS_REQUIRE_SERVICES=1`) and is skipped, saying so, otherwise.
pub(crate) async fn with_postgres(prefix: &str, body: impl FnOnce(&str) + Send + 'static) {
    let Some(admin) = std::env::var("KORVUS_TEST_DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        assert!(
            std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "KORVUS_TEST_DATABASE_URL must be set when KORVUS_REQUIRE_SERVICES=1"
        );
        eprintln!("skipped: KORVUS_TEST_DATABASE_URL not set");
        return;
    };
    let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
    let url = create_database(&admin, &name).await;
    let outcome = tokio::task::spawn_blocking(move || body(&url)).await;
    drop_database(&admin, &name).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

pub(crate) async fn drop_database(admin: &str, name: &str) {
    let mut conn = PgConnection::connect(admin)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await
        .expect("drop the test database");
    conn.close().await.ok();
}

async fn s3(endpoint: &str, bucket: &str) -> S3BlobStore {
    S3BlobStore::builder(
        bucket,
        S3Credentials::fixed(ACCESS_KEY_ID, SECRET_ACCESS_KEY),
    )
    .endpoint_url(endpoint)
    .force_path_style(true)
    .region("us-east-1")
    .build()
    .await
    .expect("build the S3 client")
}

/// Keys in the bucket.
async fn keys(store: &S3BlobStore) -> Vec<String> {
    let page = store
        .client()
        .list_objects_v2()
        .bucket(store.bucket())
        .send()
        .await
        .expect("list the bucket");
    page.contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect()
}

async fn empty_and_remove(store: &S3BlobStore) {
    for key in keys(store).await {
        store
            .client()
            .delete_object()
            .bucket(store.bucket())
            .key(key)
            .send()
            .await
            .expect("delete for teardown");
    }
    store
        .client()
        .delete_bucket()
        .bucket(store.bucket())
        .send()
        .await
        .expect("delete the bucket");
}

/// A bucket of its own on the test S3 service (moto), named
/// `<prefix>-<uuid>`: `korvus`'s environment for it (endpoint, bucket,
/// region, path style, credentials). `None` (said why) where the service
/// may be missing; under `cargo xtask test` a missing one fails.
pub(crate) async fn s3_bucket(prefix: &str) -> Option<Vec<(&'static str, String)>> {
    let Some(endpoint) = std::env::var("KORVUS_TEST_S3_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        assert!(
            std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "KORVUS_TEST_S3_ENDPOINT must be set when KORVUS_REQUIRE_SERVICES=1"
        );
        eprintln!("skipped: KORVUS_TEST_S3_ENDPOINT not set");
        return None;
    };
    let bucket = format!("{prefix}-{}", uuid::Uuid::now_v7().simple());
    s3(&endpoint, &bucket)
        .await
        .client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create the bucket");
    Some(vec![
        ("KORVUS_S3_BUCKET", bucket),
        ("KORVUS_S3_ENDPOINT", endpoint),
        ("KORVUS_S3_REGION", "us-east-1".to_owned()),
        ("KORVUS_S3_PATH_STYLE", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ])
}

/// `korvus` configured for PostgreSQL + S3 through the environment, with
/// credentials from the AWS default chain (its environment variables).
fn production(data: &std::path::Path, db: &str, endpoint: &str, bucket: &str) -> Command {
    let mut cmd = korvus(data);
    cmd.env("KORVUS_DATABASE_URL", db)
        .env("KORVUS_S3_BUCKET", bucket)
        .env("KORVUS_S3_ENDPOINT", endpoint)
        .env("KORVUS_S3_REGION", "us-east-1")
        .env("KORVUS_S3_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    cmd
}

const AGENT: &str = r#"
read -r input
echo "{\"type\":\"turn_start\",\"turn\":$KORVUS_REVISION}"
if [ "$KORVUS_RESUME" = 0 ]; then
    echo "first look at: $input"
    printf 'host,used\ndb-1,95\n' > usage.csv
    printf '# Findings\n\nWAL fills the disk.\n' > report.md
else
    echo "follow-up: $input"
    cp report.md r.new && printf '\n## Follow-up\n\n%s\n' "$input" >> r.new && rm -f report.md && mv r.new report.md
fi
echo "{\"type\":\"turn_end\",\"turn\":$KORVUS_REVISION}"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn run_reopen_show_export_on_postgres_and_s3() {
    let Some((admin, endpoint)) = services() else {
        return;
    };
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("korvus_cli_{suffix}");
    let bucket = format!("korvus-cli-{suffix}");
    let db = create_database(&admin, &name).await;
    let store = s3(&endpoint, &bucket).await;
    store
        .client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create the bucket");
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), "agent.sh", AGENT);
    let cmd = || production(data.path(), &db, &endpoint, &bucket);

    let migrated = ok(cmd().arg("migrate"));
    assert!(
        migrated.contains("PostgreSQL") || migrated.contains("postgres://"),
        "{migrated}"
    );
    let incident = ok(cmd().args(["incident", "new", "db-1 disk full"]));
    let incident = incident.trim();

    let run = ok(cmd()
        .args([
            "run",
            "--incident",
            incident,
            "--agent",
            "sh",
            "--agent-arg",
        ])
        .arg(&agent)
        .arg("why is the disk full?"));
    assert!(
        run.contains("assistant: first look at: why is the disk full?"),
        "{run}"
    );
    assert!(run.contains(": completed (exit reason completed)"), "{run}");
    let id = session_id(&run);

    let reopen = ok(cmd()
        .args(["reopen", &id, "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("what now?"));
    assert!(reopen.contains("user: what now?"), "{reopen}");
    assert!(
        reopen.contains("assistant: follow-up: what now?"),
        "{reopen}"
    );
    assert!(
        !reopen.contains("first look at"),
        "the earlier events are not shown again:\n{reopen}"
    );
    assert!(
        reopen.contains("1 unchanged, not stored again (usage.csv)"),
        "{reopen}"
    );

    let show = ok(cmd().args(["show", &id]));
    assert!(show.contains("status     completed"), "{show}");
    assert!(show.contains("rev 1   completed"), "{show}");
    assert!(show.contains("rev 2   completed"), "{show}");
    assert!(show.contains("usage.csv"), "{show}");
    assert!(show.contains("text/csv"), "{show}");

    let export = ok(cmd().args(["export", &id]));
    let lines: Vec<serde_json::Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).expect("every exported line is JSON"))
        .collect();
    assert_eq!(lines[0]["id"], id, "the header comes first");
    let kinds: Vec<&str> = lines[1..]
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "turn_start").count(),
        2,
        "{kinds:?}"
    );
    assert!(lines
        .iter()
        .any(|e| e["role"] == "user" && e["text"] == "what now?"));

    // The bytes are in the bucket and the rows in PostgreSQL.
    let stored = keys(&store).await;
    assert!(
        stored
            .iter()
            .any(|k| k.ends_with("reports/000001/1/report.md")),
        "{stored:?}"
    );
    assert!(
        stored
            .iter()
            .any(|k| k.ends_with("reports/000002/2/report.md")),
        "{stored:?}"
    );
    let mut conn = PgConnection::connect(&db)
        .await
        .expect("connect to the test database");
    let reports: i64 = sqlx::query_scalar("SELECT count(*) FROM reports")
        .fetch_one(&mut conn)
        .await
        .expect("count reports");
    assert_eq!(reports, 2);
    conn.close().await.ok();
    assert!(
        !data.path().join("korvus.db").exists(),
        "no SQLite database in production mode"
    );

    empty_and_remove(&store).await;
    drop_database(&admin, &name).await;
}

/// A bucket that does not exist is named before anything runs: `korvus
/// run` exits 1 without writing a row (no incident, no session).
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bucket_is_named_before_any_row_is_written() {
    let Some((admin, endpoint)) = services() else {
        return;
    };
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("korvus_cli_{suffix}");
    let bucket = format!("korvus-missing-{suffix}");
    let db = create_database(&admin, &name).await;
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), "agent.sh", "touch ran\nexit 0\n");
    let out = production(data.path(), &db, &endpoint, &bucket)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .args(crate::support::NO_CGROUP)
        .arg("is the bucket there?")
        .output()
        .expect("korvus runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("blob store"), "{stderr}");
    assert!(stderr.contains(&format!("s3://{bucket}")), "{stderr}");
    assert!(stderr.contains(&endpoint), "{stderr}");
    let mut conn = PgConnection::connect(&db).await.expect("connect");
    for table in ["incidents", "sessions"] {
        let (n,): (i64,) = sqlx::query_as(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&mut conn)
            .await
            .expect("count");
        assert_eq!(n, 0, "no {table} row was written");
    }
    conn.close().await.ok();
    drop_database(&admin, &name).await;
}

/// The bucket is deleted while the agent works: the upload fails, the
/// run's scratch dir is kept; once the bucket exists again `korvus
/// salvage` stores it — the report and the progress file land in the
/// session's revision, and `show` says where they came from.
#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_deleted_mid_run_keeps_the_dir_and_salvage_stores_it() {
    let Some((admin, endpoint)) = services() else {
        return;
    };
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("korvus_cli_{suffix}");
    let bucket = format!("korvus-gone-{suffix}");
    let db = create_database(&admin, &name).await;
    let store = s3(&endpoint, &bucket).await;
    let create = || async {
        store
            .client()
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("create the bucket");
    };
    create().await;
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '# What I found' > report.md\n\
         mkdir -p work && echo 'step 3 of 5' > work/progress.txt\n\
         echo 'agent is working'\n\
         n=0; while [ ! -e go ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n",
    );
    let cmd = || production(data.path(), &db, &endpoint, &bucket);
    let (mut child, seen) = crate::support::spawn_until_working(
        cmd()
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(crate::support::NO_CGROUP)
            .arg("what happened?"),
    );
    let id = session_id(&seen);
    let dir = data.path().join("scratch").join(&id).join("1");

    empty_and_remove(&store).await;
    std::fs::write(dir.join("go"), "").unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .expect("korvus ends");
    assert!(!status.success(), "nothing was stored: {status:?}");
    assert!(dir.join("work/progress.txt").exists(), "the dir is kept");
    let show = ok(cmd().args(["show", &id]));
    assert!(show.contains("kept at"), "{show}");

    create().await;
    let salvaged = ok(cmd().args(["salvage", &id]));
    assert!(salvaged.contains("report stored"), "{salvaged}");
    assert!(salvaged.contains("stored whole"), "{salvaged}");
    let show = ok(cmd().args(["show", &id]));
    assert!(show.contains("salvaged from"), "{show}");
    let progress = ok(cmd().args(["cat", &id, "work/progress.txt"]));
    assert_eq!(progress.trim(), "step 3 of 5");
    assert!(!dir.exists(), "stored whole: the dir is removed");
    assert!(
        keys(&store)
            .await
            .iter()
            .any(|k| k.ends_with("/progress.txt")),
        "{:?}",
        keys(&store).await
    );

    empty_and_remove(&store).await;
    drop_database(&admin, &name).await;
}

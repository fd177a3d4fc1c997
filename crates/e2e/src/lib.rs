//! End-to-end tests of korvus on its production backends: PostgreSQL
//! (`PgStore`, `PgLog`) and S3 (`S3BlobStore` on moto), with real scratch
//! directories and git seeding.
//!
//! # Overview
//!
//! This crate has no API. Its one test binary, `tests/tests.rs`, has a
//! module per layer under test: `session` runs the `Manager` lifecycle
//! (create, seed, run, land, reopen) and `harvest` runs the persist phase,
//! both against a fresh PostgreSQL database and a fresh bucket per test.
//!
//! # Why it is shaped like this
//!
//! `korvus-session` and `korvus-harvest` test on in-memory backends behind
//! fault injectors, which is fast and covers their logic. Running them on
//! PostgreSQL and S3 needs sqlx and the AWS SDK, the two slowest builds in
//! the workspace; keeping those tests here means only this unpublished
//! crate builds the drivers for them, and the session and harvest crates
//! stay free of both even as dev-dependencies.
//!
//! # Running
//!
//! `cargo xtask test -p korvus-e2e` starts a throwaway PostgreSQL and a moto
//! S3 server, sets `KORVUS_TEST_DATABASE_URL` and `KORVUS_TEST_S3_ENDPOINT`,
//! and runs the tests with `KORVUS_REQUIRE_SERVICES=1`, so a missing service
//! fails them. Under a plain `cargo test` without those variables every test
//! here passes without doing anything, after printing why.
#![deny(missing_docs)]

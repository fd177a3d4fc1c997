//! Integration tests of korvus-store-sql: the `korvus-testkit` Store and
//! TurnLog contracts against PostgreSQL and SQLite, plus what only SQL
//! backends have (database-enforced keys, driver-error mapping, migrations).
//!
//! PostgreSQL tests need `KORVUS_TEST_DATABASE_URL` (set by `cargo xtask
//! test`, which starts a throwaway server); each gets a database of its own.
//! Without the URL they fail under `cargo xtask test` and are skipped, with
//! the reason printed, under a plain `cargo test`. SQLite tests use their own
//! temporary files.
//!
//! One test binary (every extra binary is another link step); one module
//! file per topic next to this one, and `support` for the test databases.

mod support;

mod commit_faults;
mod concurrency;
mod contract;
mod database_keys;
mod driver_errors;
mod invalid_input;
mod migrations;
mod previous_release;
mod shared_database;
mod turn_logs;

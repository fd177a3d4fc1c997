//! End-to-end tests on the real backends, one module per topic: PostgreSQL
//! with S3 (`session`, `harvest`) and the embedded default, SQLite with
//! files (`closure`, `fence`); agent output into SQL turn logs (`output`).
//! Each test takes a fresh database and a fresh bucket from
//! [`support::Backends`]; without the services (plain `cargo test`) it
//! returns early after printing why, and under `cargo xtask test` it fails.

mod support;

mod admission;
mod agents;
mod agents_budget;
mod agents_handoff;
mod cancel;
mod chaos;
mod closure;
mod descriptors;
mod fence;
mod harvest;
mod output;
mod queue_kill;
mod session;
mod sweep;

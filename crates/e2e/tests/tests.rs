//! End-to-end tests on PostgreSQL + S3, one module per layer under test.
//! Each test takes a fresh database and a fresh bucket from
//! [`support::Backends`]; without the services (plain `cargo test`) it
//! returns early after printing why, and under `cargo xtask test` it fails.

mod support;

mod harvest;
mod session;

//! Integration tests of korvus-session: the lifecycle on real in-memory
//! backends behind fault injectors, one module per topic. The same lifecycle
//! on PostgreSQL + S3 is tested in `korvus-e2e`.

mod support;

mod admission;
mod cancel;
mod check;
mod checkpoints;
mod closure;
mod create;
mod docs;
mod faults;
mod handoff;
mod idle;
mod lease;
mod metrics;
mod ordering;
mod partial_failure;
mod prune;
mod reopen;
mod resume;
mod salvage;
mod shutdown;
mod spans;
mod watch;

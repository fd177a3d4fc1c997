//! Integration tests of korvus-workspace: real git, real filesystem.

mod support;

mod archive;
mod context;
mod mock;
mod permissions;
mod props;
mod reap;
mod restore;
mod scratch;
mod seed;
mod skills;

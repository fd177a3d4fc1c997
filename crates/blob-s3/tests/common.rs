//! Fixtures: the crate's own `testing` module, compiled into the test binary
//! (a package cannot enable its own feature for its tests).

#[path = "../src/testing.rs"]
#[allow(unreachable_pub, dead_code)] // Public API of the library, partly unused here.
mod testing;

pub(crate) use testing::*;

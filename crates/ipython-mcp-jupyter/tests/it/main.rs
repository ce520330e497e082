//! The jupyter crate's integration tests, in one test binary.

mod kernel;

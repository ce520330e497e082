//! The config crate's integration tests, in one test binary.

mod named_once;

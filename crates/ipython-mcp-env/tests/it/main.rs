//! The environment crate's integration tests, in one test binary (built and linked once).

#[path = "../ci/mod.rs"]
mod ci;

mod named;
mod provision;
mod resolution;

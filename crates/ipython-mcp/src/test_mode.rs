//! The hidden test mode, for the project's own tests only (ARCHITECTURE.md, "Test mode").
//!
//! `IPYTHON_MCP_TEST_MODE` is deliberately not a flag, not in `--help` and not in the settings
//! table (docs/src/configuration.md): a user cannot turn it on by accident. Its values:
//! - `fixtures`: also serve the conformance fixtures (test tools, resources, prompts, the
//!   `test_trigger_tool_change` hook and `test_panic_session`, which makes a session's actor
//!   panic to test its supervision); the bearer token is still required.
//! - `conformance`: fixtures, and HTTP without a bearer token, because the official conformance
//!   suite cannot send one.
//!
//! Either refuses to run unless the server listens on loopback only, and says loudly at start
//! that it is on.
//!
//! `IPYTHON_MCP_TEST_DEATH_WATCH=pipe`, just as hidden, makes kernels die with the server
//! through the portable pipe watch that systems without Linux's parent-death signal use, so
//! that Linux CI exercises it too. It changes nothing else.

use ipython_mcp_config::{Config, Transport};

/// The variable that turns the test mode on.
pub const VARIABLE: &str = "IPYTHON_MCP_TEST_MODE";

/// The variable that selects the portable death watch on Linux.
pub const DEATH_WATCH_VARIABLE: &str = "IPYTHON_MCP_TEST_DEATH_WATCH";

/// Whether the tests asked for the pipe death watch; a value it does not know is an error.
pub fn pipe_death_watch_from_env() -> Result<bool, String> {
    match std::env::var_os(DEATH_WATCH_VARIABLE) {
        None => Ok(false),
        Some(value) if value == "pipe" => Ok(true),
        Some(_) => Err(format!(
            "{DEATH_WATCH_VARIABLE} is for the project's tests and must be pipe; unset it"
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestMode {
    Off,
    Fixtures,
    Conformance,
}

impl TestMode {
    /// Reads the variable; a value it does not know, or a mode that would expose the test
    /// surface beyond loopback, is a one-line error.
    pub fn from_env(config: &Config) -> Result<TestMode, String> {
        let Some(value) = std::env::var_os(VARIABLE) else {
            return Ok(TestMode::Off);
        };
        if !ipython_mcp_mcp::fixtures::COMPILED {
            return Err(format!(
                "{VARIABLE} is for the project's tests, and this build has no test fixtures; unset it"
            ));
        }
        let mode = match value.to_str() {
            Some("fixtures") => TestMode::Fixtures,
            Some("conformance") => TestMode::Conformance,
            _ => {
                return Err(format!(
                    "{VARIABLE} is for the project's tests and must be fixtures or conformance; unset it"
                ))
            }
        };
        if config.http.allow_remote || !config.http.host.is_loopback() {
            return Err(format!(
                "{VARIABLE} serves test fixtures and may disable authentication, so it refuses non-loopback addresses and --allow-remote"
            ));
        }
        if mode == TestMode::Conformance && config.transport != Transport::Http {
            return Err(format!(
                "{VARIABLE}=conformance only makes sense with --transport http"
            ));
        }
        Ok(mode)
    }

    /// Whether the conformance fixtures are served.
    pub fn fixtures(self) -> bool {
        self != TestMode::Off
    }

    /// Whether HTTP requests need the bearer token.
    pub fn requires_token(self) -> bool {
        self != TestMode::Conformance
    }
}

//! Validated configuration for ipython-mcp.
//!
//! Configuration arrives in two stages. The binary collects raw strings (from clap flags, each
//! backed by an `IPYTHON_MCP_*` environment variable) into a [`RawConfig`]; [`Config::from_raw`]
//! turns them into typed, checked values or one [`Error`] that names the setting. Nothing below
//! the binary sees clap, and nothing here touches tokio or the process environment, so every
//! rule is a plain unit test.
//!
//! The table of settings ([`SETTINGS`]) is the single place a setting is declared: the CLI is
//! built from it, [`RawConfig`] is keyed by it, the typed defaults are its default texts parsed
//! like given values, and the documented table (`docs/src/configuration.md`) and the error
//! messages name what it names.

mod allowlist;
mod config;
#[cfg(test)]
mod docs_links;
mod environment;
mod error;
mod jupyter;
mod limits;
mod namespace;
mod parse;
mod principals;
mod redact;
mod settings;
mod surface;
mod transport;

pub use allowlist::{host_name, port_number, AllowedHost, HostPattern, DEFAULT_PORTS};
pub use config::Config;
pub use environment::{NamedEnvironment, Variables, MAX_REQUIREMENTS, MAX_REQUIREMENT_CHARS};
pub use error::Error;
pub use jupyter::{is_remote_name, JupyterServer, JupyterToken, REMOTE_ATTACH, REMOTE_START};
pub use limits::{
    Checkpoint, KernelLimits, KernelMemory, OutputLimits, QueueLimits, Sandbox, SandboxMode,
    SandboxNetwork, Spares, SpoolBounds, Timeouts, ToolLimits,
};
pub use namespace::Namespace;
pub use principals::{
    parse_principals, Credential, Principal, PrincipalName, PrincipalsError, Quotas,
    MAX_PRINCIPAL_NAME_CHARS,
};
pub use redact::Redactor;
pub use settings::*;
pub use surface::{StructuredOutput, Toolsets};
pub use transport::{Http, OAuth, Token, TokenSource, Transport};

//! The crate's one error type: a setting that failed validation, named as the user gave it.

/// A setting that failed validation; the message is one line naming the setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid configuration: {env} (--{flag}) must be a positive integer, got {value:?}")]
    NotPositiveInteger {
        env: &'static str,
        flag: &'static str,
        value: String,
    },
    #[error(
        "invalid configuration: {env} (--{flag}) must be a whole number (0 or more), got {value:?}"
    )]
    NotNonNegativeInteger {
        env: &'static str,
        flag: &'static str,
        value: String,
    },
    #[error("invalid configuration: {env} (--{flag}) must be a positive, finite number of seconds, got {value:?}")]
    NotPositiveSeconds {
        env: &'static str,
        flag: &'static str,
        value: String,
    },
    #[error("invalid configuration: {env} (--{flag}) must not be empty")]
    Empty {
        env: &'static str,
        flag: &'static str,
    },
    #[error("invalid configuration: {env} (--{flag}): {problem}")]
    Invalid {
        env: &'static str,
        flag: &'static str,
        problem: String,
    },
    #[error("invalid configuration: {env} (--{flag}) is {value}s, below {other_env} ({other}s)")]
    BelowOther {
        env: &'static str,
        flag: &'static str,
        value: f64,
        other_env: &'static str,
        other: f64,
    },
}

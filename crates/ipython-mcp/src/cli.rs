//! Command-line interface: every setting of `ipython_mcp_config::SETTINGS` becomes a flag
//! backed by its `IPYTHON_MCP_*` variable, built from that table (clap's builder), so a setting
//! is declared once. Values arrive as text and are validated by `ipython_mcp_config`, so a bad
//! value is reported in one line naming the setting.

use clap::parser::ValueSource;
use clap::{Arg, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use ipython_mcp_config::{CompatFlag, Config, Kind, RawConfig, Setting, JUPYMCP_FLAGS, SETTINGS};

/// The part of the command line that is not a setting: the subcommand.
#[derive(Debug, Parser)]
#[command(
    name = "ipython-mcp",
    version,
    about = "An MCP server that gives AI agents live, persistent Python in a real IPython kernel.",
    long_about = "An MCP server that gives AI agents live, persistent Python in a real IPython kernel.\n\nWithout a subcommand it serves MCP on stdio (point your MCP client at this binary), or with --transport http on http://127.0.0.1:8765/mcp behind a bearer token."
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Speak the json-lines desktop protocol on stdin and stdout instead of MCP (as jupymcp's
    /// --json-lines): one JSON request per line, one response per line (README, "JSON lines")
    #[arg(long)]
    json_lines: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Find (or provision) Python, start a kernel, run a round trip, and print what was found
    /// and how long each step took.
    Doctor {
        /// Also print the server's log lines (info and above) on stderr; without it only
        /// warnings and errors are, unless --log or IPYTHON_MCP_LOG asks for more.
        #[arg(long, short)]
        verbose: bool,
    },
}

/// The parsed command line: the subcommand and the settings as given.
#[derive(Debug)]
pub struct Cli {
    pub command: Option<Command>,
    /// `--json-lines`: the desktop protocol instead of MCP.
    pub json_lines: bool,
    raw: RawConfig,
}

impl Cli {
    /// Parses the process's arguments and environment; exits with clap's message (status 2)
    /// on an unknown flag, and prints help or the version when asked.
    pub fn parse() -> Cli {
        Cli::from_matches(&command().get_matches())
    }

    fn from_matches(matches: &clap::ArgMatches) -> Cli {
        let Args {
            command,
            json_lines,
        } = Args::from_arg_matches(matches).unwrap_or_else(|error| error.exit());
        let mut raw = RawConfig::default();
        for setting in SETTINGS {
            if let Some(value) = matches.get_one::<String>(setting.name) {
                if !is_unfilled_bundle_placeholder(value) {
                    raw.set(*setting, value.clone());
                }
            }
        }
        // A jupymcp flag beats our variables but not our own flags: it is on the command line,
        // where a swapped client configuration puts it.
        for compat in JUPYMCP_FLAGS {
            if let Some(value) = matches.get_one::<String>(compat.flag) {
                for setting in compat.settings {
                    if matches.value_source(setting.name) != Some(ValueSource::CommandLine) {
                        raw.set(*setting, value.clone());
                    }
                }
            }
        }
        Cli {
            command,
            json_lines,
            raw,
        }
    }

    /// The log filter: the one configured, except that `doctor` prints its report without the
    /// server's info lines unless logs were asked for (`--verbose`, `--log`, `IPYTHON_MCP_LOG`).
    pub fn log_filter<'a>(&self, config: &'a Config) -> &'a str {
        match self.command {
            Some(Command::Doctor { verbose: false })
                if self.raw.get(ipython_mcp_config::LOG).is_none() =>
            {
                "warn"
            }
            _ => &config.log,
        }
    }

    pub fn config(&self) -> Result<Config, ipython_mcp_config::Error> {
        let mut raw = self.raw.clone();
        raw.working_dir = std::env::current_dir().ok();
        Config::from_raw(&raw)
    }
}

/// True for `${user_config.NAME}` as a whole value: a Claude Desktop extension (MCP Bundle)
/// leaves an optional setting the user did not fill in as its placeholder, unreplaced, and the
/// bundle's manifest maps each such setting to a variable. Not given, then, rather than an
/// interpreter or directory literally called `${user_config.python}`.
fn is_unfilled_bundle_placeholder(value: &str) -> bool {
    value
        .strip_prefix("${user_config.")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|char| char.is_ascii_alphanumeric() || char == '_')
        })
}

/// The whole command line: the subcommand, one flag per setting in table order, then jupymcp's.
fn command() -> clap::Command {
    let command = SETTINGS.iter().fold(Args::command(), |command, setting| {
        command.arg(flag(setting))
    });
    JUPYMCP_FLAGS
        .iter()
        .fold(command, |command, compat| command.arg(compat_flag(compat)))
}

fn compat_flag(compat: &CompatFlag) -> Arg {
    Arg::new(compat.flag)
        .long(compat.flag)
        .global(true)
        .value_name(compat.value_name)
        .help(compat.help)
        .help_heading("jupymcp's flags")
}

fn flag(setting: &Setting) -> Arg {
    let help = match setting.default {
        "none" => setting.help.to_owned(),
        default => format!("{} [default: {default}]", setting.help),
    };
    let arg = Arg::new(setting.name)
        .long(setting.flag)
        .env(setting.env)
        .global(true)
        .value_name(setting.value_name)
        .help(help);
    match setting.kind {
        Kind::Value => arg,
        Kind::Secret => arg.hide_env_values(true),
        Kind::Switch => arg.num_args(0..=1).default_missing_value("true"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        let matches = command()
            .try_get_matches_from(std::iter::once("ipython-mcp").chain(args.iter().copied()))
            .expect("valid command line");
        Cli::from_matches(&matches)
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn every_setting_is_a_flag_and_a_switch_may_stand_alone() {
        // A switch may take a value, so it goes last (`--allow-remote doctor` reads as a value).
        let cli = parse(&["--max-text-chars", "77", "doctor", "--allow-remote"]);
        assert!(matches!(
            cli.command,
            Some(Command::Doctor { verbose: false })
        ));
        assert_eq!(cli.raw.get(ipython_mcp_config::MAX_TEXT_CHARS), Some("77"));
        assert_eq!(cli.raw.get(ipython_mcp_config::ALLOW_REMOTE), Some("true"));
        for setting in SETTINGS {
            let flag = format!("--{}", setting.flag);
            let cli = parse(&[&flag, "x"]);
            assert_eq!(cli.raw.get(*setting), Some("x"), "{flag}");
        }
    }

    #[test]
    fn jupymcp_flags_set_our_settings() {
        use ipython_mcp_config as config;
        let cli = parse(&[
            "--default-timeout",
            "120",
            "--max-timeout",
            "600",
            "--max-output-bytes",
            "65536",
            "--max-output-blocks",
            "12",
            "--max-kernels",
            "3",
            "--idle-timeout",
            "60",
            "--workspace-root",
            "/",
            "--transport",
            "streamable-http",
            "--http-token",
            "0123456789abcdef",
        ]);
        for (setting, value) in [
            (config::OPERATION_TIMEOUT, "120"),
            (config::MAX_TIMEOUT, "600"),
            (config::MAX_TEXT_CHARS, "65536"),
            (config::MAX_REPLY_BYTES, "65536"),
            (config::MAX_DISPLAY_ITEMS, "12"),
            (config::MAX_KERNELS, "3"),
            (config::KERNEL_IDLE_TIMEOUT, "60"),
            (config::WORKSPACE_ROOT, "/"),
            (config::TRANSPORT, "streamable-http"),
        ] {
            assert_eq!(cli.raw.get(setting), Some(value), "{}", setting.name);
        }
        let config = cli.config().expect("valid");
        assert_eq!(config.timeouts.operation.as_secs(), 120);
        assert_eq!(config.timeouts.max_operation.as_secs(), 600);
        assert_eq!(config.limits.max_text_chars, 65536);
        assert_eq!(config.limits.max_reply_bytes, 65536);
        assert_eq!(config.limits.max_display_items, 12);
        assert_eq!(config.kernels.max_kernels, 3);
        assert_eq!(config.kernels.idle_timeout.as_secs(), 60);
        assert_eq!(config.transport, config::Transport::Http);
    }

    #[test]
    fn our_own_flag_wins_over_a_jupymcp_flag_for_the_same_setting() {
        let cli = parse(&["--max-output-bytes", "4096", "--max-text-chars", "100"]);
        assert_eq!(cli.raw.get(ipython_mcp_config::MAX_TEXT_CHARS), Some("100"));
        assert_eq!(
            cli.raw.get(ipython_mcp_config::MAX_REPLY_BYTES),
            Some("4096")
        );
    }

    #[test]
    fn an_unfilled_bundle_placeholder_is_a_setting_not_given() {
        let cli = parse(&["--python", "${user_config.python}", "--toolsets", "all"]);
        assert_eq!(cli.raw.get(ipython_mcp_config::PYTHON), None);
        assert_eq!(cli.raw.get(ipython_mcp_config::TOOLSETS), Some("all"));
        for kept in [
            "${user_config.}",
            "${user_config.a b}",
            "x${user_config.python}",
        ] {
            assert!(!is_unfilled_bundle_placeholder(kept), "{kept}");
        }
    }

    #[test]
    fn doctor_logs_only_warnings_unless_logs_are_asked_for() {
        let config = Config::from_raw(&RawConfig::default()).expect("defaults are valid");
        assert_eq!(parse(&["doctor"]).log_filter(&config), "warn");
        assert_eq!(parse(&["doctor", "--verbose"]).log_filter(&config), "info");
        let asked = parse(&["--log", "debug", "doctor"]);
        let asked_config = asked.config().expect("valid");
        assert_eq!(asked.log_filter(&asked_config), "debug");
        assert_eq!(parse(&[]).log_filter(&config), "info");
    }
}

//! Command-line interface: every setting of `ipython_mcp_config::SETTINGS` becomes a flag
//! backed by its `IPYTHON_MCP_*` variable, built from that table (clap's builder), so a setting
//! is declared once. Values arrive as text and are validated by `ipython_mcp_config`, so a bad
//! value is reported in one line naming the setting.

use clap::{Arg, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use ipython_mcp_config::{Config, Kind, RawConfig, Setting, SETTINGS};

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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Find (or provision) Python, start a kernel, run a round trip, and print what was found
    /// and how long each step took.
    Doctor,
}

/// The parsed command line: the subcommand and the settings as given.
#[derive(Debug)]
pub struct Cli {
    pub command: Option<Command>,
    raw: RawConfig,
}

impl Cli {
    /// Parses the process's arguments and environment; exits with clap's message (status 2)
    /// on an unknown flag, and prints help or the version when asked.
    pub fn parse() -> Cli {
        Cli::from_matches(&command().get_matches())
    }

    fn from_matches(matches: &clap::ArgMatches) -> Cli {
        let command = Args::from_arg_matches(matches)
            .unwrap_or_else(|error| error.exit())
            .command;
        let mut raw = RawConfig::default();
        for setting in SETTINGS {
            if let Some(value) = matches.get_one::<String>(setting.name) {
                raw.set(*setting, value.clone());
            }
        }
        Cli { command, raw }
    }

    pub fn config(&self) -> Result<Config, ipython_mcp_config::Error> {
        let mut raw = self.raw.clone();
        raw.working_dir = std::env::current_dir().ok();
        Config::from_raw(&raw)
    }
}

/// The whole command line: the subcommand, and one flag per setting in table order.
fn command() -> clap::Command {
    SETTINGS.iter().fold(Args::command(), |command, setting| {
        command.arg(flag(setting))
    })
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
        assert!(matches!(cli.command, Some(Command::Doctor)));
        assert_eq!(cli.raw.get(ipython_mcp_config::MAX_TEXT_CHARS), Some("77"));
        assert_eq!(cli.raw.get(ipython_mcp_config::ALLOW_REMOTE), Some("true"));
        for setting in SETTINGS {
            let flag = format!("--{}", setting.flag);
            let cli = parse(&[&flag, "x"]);
            assert_eq!(cli.raw.get(*setting), Some("x"), "{flag}");
        }
    }
}

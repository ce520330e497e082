//! macOS: the same policy as a Seatbelt profile, applied by running the kernel under
//! `/usr/bin/sandbox-exec -p PROFILE`. Built on every OS so its text is tested everywhere; only
//! macOS runs it. In Seatbelt's profile language the last matching rule wins, so the profile
//! allows everything, then takes writes away and gives back the writable directories, then
//! takes the denied paths away from reads and writes alike, then gives the kernel back its
//! own entries in the server's private directory.

use std::fmt::Write as _;
use std::path::Path;

use crate::{KernelDirs, Network, Policy};

/// The program that applies a profile to the command it runs.
pub(crate) const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The profile for a kernel with `dirs`.
pub(crate) fn profile(policy: &Policy, dirs: &KernelDirs) -> String {
    let mut profile = String::from("(version 1)\n(allow default)\n");
    profile.push_str("(deny file-write*)\n(allow file-write*\n");
    for dir in policy.writable(dirs) {
        let _ = writeln!(profile, "  (subpath {})", quoted(&dir));
    }
    // What every process writes: the null and terminal devices, its own descriptors.
    profile.push_str(
        "  (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/dtracehelper\")\n  (regex #\"^/dev/tty\") (regex #\"^/dev/fd/\"))\n",
    );
    let denied = policy.denied();
    if !denied.is_empty() {
        profile.push_str("(deny file-read* file-write*\n");
        for path in &denied {
            let _ = writeln!(profile, "  (subpath {})", quoted(path));
        }
        profile.push_str(")\n");
    }
    // The kernel's own entries in the server's private directory, denied above.
    let own = policy.own(dirs);
    if !own.is_empty() {
        profile.push_str("(allow file-read* file-write*\n");
        for dir in &own {
            let _ = writeln!(profile, "  (subpath {})", quoted(dir));
        }
        profile.push_str(")\n");
    }
    match &policy.network {
        Network::On => {}
        Network::Off => {
            profile.push_str("(deny network-outbound (remote ip \"*:*\"))\n");
        }
        Network::Proxy { port, .. } => {
            let _ = write!(
                profile,
                "(deny network-outbound (remote ip \"*:*\"))\n(allow network-outbound (remote ip \"localhost:{port}\"))\n"
            );
        }
    }
    profile
}

/// A path as a profile string literal.
fn quoted(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mode;

    fn policy(mode: Mode, network: Network) -> Policy {
        Policy {
            mode,
            network,
            explicit: true,
            home: Some("/Users/u".into()),
            read_deny: vec!["/etc/ipython-mcp/token".into()],
            write: Vec::new(),
            workspace: Some("/Users/u/project \"x\"".into()),
            temp: "/private/tmp".into(),
            max_processes: None,
            namespaces: true,
            private_temp: false,
            private: None,
            state: None,
        }
    }

    #[test]
    fn the_profile_gives_writes_back_then_takes_the_secrets_away() {
        let text = profile(
            &Policy {
                private: Some("/Users/u/.local/state/ipython-mcp/ipython-mcp-1".into()),
                ..policy(Mode::WorkspaceWrite, Network::On)
            },
            &KernelDirs {
                own: vec!["/Users/u/.local/state/ipython-mcp/ipython-mcp-1/k1".into()],
                ..KernelDirs::default()
            },
        );
        let position = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle} in\n{text}"))
        };
        // Last match wins: the deny of writes, then the writable directories, then the secrets.
        assert!(position("(deny file-write*)") < position("(allow file-write*"));
        assert!(position("(allow file-write*") < position("(deny file-read* file-write*"));
        assert!(text.contains("(subpath \"/private/tmp\")"));
        assert!(
            text.contains("(subpath \"/Users/u/project \\\"x\\\"\")"),
            "{text}"
        );
        assert!(text.contains("(subpath \"/Users/u/.ssh\")"));
        assert!(text.contains("(subpath \"/etc/ipython-mcp/token\")"));
        // The private directory is denied, then the kernel's own entry in it given back.
        let denied = position("(subpath \"/Users/u/.local/state/ipython-mcp/ipython-mcp-1\")");
        let own = position("(subpath \"/Users/u/.local/state/ipython-mcp/ipython-mcp-1/k1\")");
        assert!(position("(deny file-read* file-write*") < denied);
        assert!(denied < position("(allow file-read* file-write*"));
        assert!(position("(allow file-read* file-write*") < own);
        assert!(!text.contains("network-outbound"));
        // Balanced: every form closes.
        assert_eq!(
            text.matches('(').count(),
            text.matches(')').count(),
            "{text}"
        );
    }

    #[test]
    fn read_only_writes_the_temp_directory_and_the_network_follows_the_policy() {
        let offline = profile(
            &policy(Mode::ReadOnly, Network::Off),
            &KernelDirs::default(),
        );
        assert!(
            !offline.contains("(subpath \"/Users/u/project"),
            "{offline}"
        );
        assert!(offline.contains("(deny network-outbound (remote ip \"*:*\"))"));
        let proxied = profile(
            &policy(
                Mode::WorkspaceWrite,
                Network::Proxy {
                    port: 4321,
                    hosts: vec!["pypi.org".into()],
                    socket: None,
                },
            ),
            &KernelDirs::default(),
        );
        assert!(proxied.contains("(allow network-outbound (remote ip \"localhost:4321\"))"));
        assert_eq!(
            proxied.matches('(').count(),
            proxied.matches(')').count(),
            "{proxied}"
        );
    }

    /// On macOS itself (its CI job runs the unit tests): `sandbox-exec` takes the profile, a
    /// secret is unreadable, the workspace writable, and a path outside it is not.
    #[cfg(target_os = "macos")]
    #[test]
    fn sandbox_exec_enforces_the_profile() {
        // Outside the temp directory, which the profile makes writable.
        let base = std::env::var_os("HOME").expect("HOME");
        let made = tempfile::tempdir_in(base).expect("home");
        let home = made.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
        std::fs::write(home.join(".ssh/id"), "SECRET").expect("secret");
        std::fs::create_dir_all(home.join("work")).expect("work");
        std::fs::create_dir_all(home.join("other")).expect("other");
        let policy = Policy {
            mode: Mode::WorkspaceWrite,
            network: Network::On,
            explicit: true,
            home: Some(home.clone()),
            read_deny: Vec::new(),
            write: Vec::new(),
            workspace: Some(home.join("work")),
            temp: std::env::temp_dir().canonicalize().expect("temp"),
            max_processes: None,
            namespaces: true,
            private_temp: false,
            private: None,
            state: None,
        };
        let text = profile(&policy, &KernelDirs::default());
        let run = |script: &str| {
            std::process::Command::new(SANDBOX_EXEC)
                .args(["-p", &text, "/bin/sh", "-c", script])
                .output()
                .expect("sandbox-exec runs")
                .status
                .success()
        };
        assert!(run("true"), "the profile is accepted:\n{text}");
        assert!(!run(&format!("cat {}", home.join(".ssh/id").display())));
        assert!(run(&format!("echo x > {}", home.join("work/ok").display())));
        assert!(!run(&format!(
            "echo x > {}",
            home.join("other/no").display()
        )));
        drop(made);
    }
}

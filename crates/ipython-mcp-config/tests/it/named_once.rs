//! Every setting's variable is spelled in the settings table only: code elsewhere names it
//! through `SETTINGS` (`ipython_mcp_config::MAX_KERNELS.env`), so renaming a setting cannot
//! leave a message pointing at a variable that no longer exists.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

/// Where `name` occurs in `line` as a whole variable name (not as the start of a longer one).
fn names(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(at, _)| {
        let next = line[at + name.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

#[test]
fn setting_variables_are_spelled_only_in_the_settings_table() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crates directory");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(crates).expect("read crates/") {
        let path = entry.expect("a crate").path();
        if path.file_name() == Some("ipython-mcp-config".as_ref()) || !path.join("src").is_dir() {
            continue;
        }
        sources(&path.join("src"), &mut files);
    }
    assert!(files.len() > 50, "the workspace's sources were not found");
    let mut spelled = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (number, line) in text.lines().enumerate() {
            // Comments may name a setting; only code that produces text is checked.
            if line.trim_start().starts_with("//") {
                continue;
            }
            for setting in ipython_mcp_config::SETTINGS {
                if names(line, setting.env) {
                    spelled.push(format!(
                        "{}:{}: {}",
                        file.display(),
                        number + 1,
                        setting.env
                    ));
                }
            }
        }
    }
    assert!(
        spelled.is_empty(),
        "use the settings table's constants instead:\n{}",
        spelled.join("\n")
    );
}

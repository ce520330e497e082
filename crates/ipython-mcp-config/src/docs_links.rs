//! The documentation's links stay whole: every relative link in README.md, CONTRIBUTING.md,
//! ARCHITECTURE.md, the crates' READMEs and the mdBook chapters in `docs/src/` names a file that
//! exists and, with `#anchor`, a heading of that file; a link to this repository's files on
//! GitHub names a file that exists here; every chapter is in `docs/src/SUMMARY.md`. mdBook does
//! not check links itself, and CI builds the book without plugins, so this test is the check.
//!
//! Parsed by hand (this crate has no markdown parser, and the docs use plain `[text](target)`
//! links): fenced code blocks and inline code spans are not prose, so links are not looked for
//! there.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// Chapters link to repository files outside `docs/src/` by their GitHub address, which works
/// both on GitHub and in the built book; those addresses are checked against this checkout.
const REPOSITORY_FILES: &str = "https://github.com/ipython-mcp/ipython-mcp/blob/HEAD/";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

fn markdown_in(directory: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    files.sort();
    files
}

/// Every document whose links are checked.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|entry| entry.expect("a directory entry").path().join("README.md"))
        .collect();
    crates.sort();
    files.extend(crates);
    files.extend(markdown_in(&root.join("docs/src")));
    files
}

/// The text with fenced code blocks blanked (their lines kept empty, so line numbers hold).
fn without_fences(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                line
            }
        })
        .collect()
}

/// Prose only: fenced blocks and inline code spans (which may span lines) removed.
fn prose(text: &str) -> String {
    without_fences(text)
        .join("\n")
        .split('`')
        .step_by(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A heading's anchor as GitHub and mdBook make it: lowercase; letters, digits, `-` and `_`
/// kept, spaces turned into `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a document's headings (a repeated heading gets `-1`, `-2`… as on GitHub).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    without_fences(text)
        .into_iter()
        .filter_map(|line| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            let rest = &line[hashes..];
            ((1..=6).contains(&hashes) && rest.starts_with(' ')).then(|| slug(rest))
        })
        .map(|anchor| {
            let count = seen.entry(anchor.clone()).or_insert(0);
            *count += 1;
            match *count {
                1 => anchor,
                n => format!("{anchor}-{}", n - 1),
            }
        })
        .collect()
}

/// The targets of the `[text](target)` links in a document's prose.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    prose
        .match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &prose[at + 2..];
            rest.find(')').map(|end| rest[..end].trim().to_owned())
        })
        .collect()
}

/// Whether `path` stays inside `directory` (both already joined onto one base).
fn inside(path: &Path, directory: &Path) -> bool {
    let mut parts: Vec<Component> = Vec::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                parts.pop();
            }
            Component::CurDir => {}
            other => parts.push(other),
        }
    }
    parts.iter().collect::<PathBuf>().starts_with(directory)
}

/// What is wrong with one link of `document`, if anything.
fn check(root: &Path, document: &Path, target: &str) -> Option<String> {
    let chapters = root.join("docs/src");
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if let Some(repository_path) = path.strip_prefix(REPOSITORY_FILES) {
        root.join(repository_path)
    } else if path.starts_with("http://")
        || path.starts_with("https://")
        || path.starts_with("mailto:")
    {
        return None;
    } else if path.is_empty() {
        document.to_path_buf()
    } else {
        let file = document.parent().expect("a directory").join(path);
        if document.starts_with(&chapters) && !inside(&file, &chapters) {
            return Some(format!(
                "`{target}` leaves docs/src/, which the book cannot follow: link to {REPOSITORY_FILES}…"
            ));
        }
        file
    };
    if !file.exists() {
        return Some(format!("`{target}`: no file {}", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|extension| extension != "md") {
        return Some(format!(
            "`{target}`: an anchor into a file that is not markdown"
        ));
    }
    let text = std::fs::read_to_string(&file).expect("a readable document");
    (!anchors(&text).iter().any(|known| known == anchor)).then(|| {
        format!(
            "`{target}`: {} has no heading whose anchor is `{anchor}`",
            file.display()
        )
    })
}

#[test]
fn every_documentation_link_resolves() {
    let root = workspace_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in documents(&root) {
        let text = std::fs::read_to_string(&document)
            .unwrap_or_else(|error| panic!("{}: {error}", document.display()));
        for target in links(&text) {
            checked += 1;
            if let Some(problem) = check(&root, &document, &target) {
                let name = document.strip_prefix(&root).unwrap_or(&document);
                broken.push(format!("{}: {problem}", name.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // A parser that found nothing would pass the loop above; the docs hold far more than this.
    assert!(checked > 50, "only {checked} links found");
}

#[test]
fn every_chapter_is_in_the_summary() {
    let chapters = workspace_root().join("docs/src");
    let summary = std::fs::read_to_string(chapters.join("SUMMARY.md")).expect("SUMMARY.md");
    let listed = links(&summary);
    for chapter in markdown_in(&chapters) {
        let name = chapter.file_name().expect("a file name").to_string_lossy();
        if name != "SUMMARY.md" {
            assert!(
                listed.iter().any(|target| *target == name),
                "docs/src/SUMMARY.md does not list {name}"
            );
        }
    }
}

#[test]
fn anchors_are_made_as_github_and_mdbook_make_them() {
    assert_eq!(
        slug(" Remote kernels (Jupyter Server, JupyterHub, gateways)"),
        "remote-kernels-jupyter-server-jupyterhub-gateways"
    );
    assert_eq!(slug("Output view (MCP Apps)"), "output-view-mcp-apps");
    assert_eq!(
        slug("Build, import, edit, reload"),
        "build-import-edit-reload"
    );
    assert_eq!(
        anchors("# A\n```sh\n# not a heading\n```\n## A\n#no\n"),
        ["a", "a-1"]
    );
    assert_eq!(
        links("[a](x.md) `[b](y.md)` [c](z.md#h)\n```\n[d](w.md)\n```"),
        ["x.md", "z.md#h"]
    );
}

//! The named environment settings: workspace, active environment name, PEP 508
//! requirements, and the variables every kernel gets.
//!
//! Everything is checked here, before anything is created: the workspace is absolute and
//! outside the project, the name is safe as a directory name, each requirement is a bounded
//! PEP 508 string (no pip options, no local paths), and variables are a JSON object of strings
//! with portable names. Requirements come out in a canonical form (normalized name, sorted
//! extras and specifiers, single spaces in markers), sorted and without duplicates, so that
//! the same dependency set always has the same fingerprint.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::error::Error;
use crate::parse::bounded;
use crate::redact::url_credentials;
use crate::settings::{
    RawConfig, Setting, ACTIVE_ENVIRONMENT, ENVIRONMENT_REQUIREMENTS, ENVIRONMENT_VARIABLES,
    ENVIRONMENT_WORKSPACE,
};

/// Most requirements one environment may list.
pub const MAX_REQUIREMENTS: usize = 200;
/// Longest single requirement string.
pub const MAX_REQUIREMENT_CHARS: usize = 1000;
/// Longest environment name.
pub const MAX_NAME_CHARS: usize = 64;
/// Most variables, and the longest name and value of one.
pub const MAX_VARIABLES: usize = 256;
pub const MAX_VARIABLE_NAME_CHARS: usize = 128;
pub const MAX_VARIABLE_VALUE_CHARS: usize = 32 * 1024;

/// A named environment: `<workspace>/<name>`, created with `requirements` (plus ipykernel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedEnvironment {
    /// Absolute, outside the project.
    pub workspace: PathBuf,
    /// Letters, digits, `.`, `_`, `-`; starts with a letter or digit.
    pub name: String,
    /// Canonical PEP 508 strings, sorted, unique.
    pub requirements: Vec<String>,
    /// The interpreter it is created from (`IPYTHON_MCP_PYTHON`); `None`: `python3` on PATH.
    pub python: Option<PathBuf>,
}

impl NamedEnvironment {
    /// Where the environment lives.
    pub fn path(&self) -> PathBuf {
        self.workspace.join(&self.name)
    }
}

/// Environment variables for kernels. `Debug` shows the names only: values may be secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Variables(BTreeMap<String, String>);

impl std::fmt::Debug for Variables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Variables {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Name and value of each variable, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// A redactor that masks these values (and URL credentials) in error messages.
    pub fn redactor(&self) -> crate::redact::Redactor {
        crate::redact::Redactor::new(self.0.values().map(String::as_str))
    }
}

impl<const N: usize> From<[(&str, &str); N]> for Variables {
    fn from(pairs: [(&str, &str); N]) -> Self {
        Variables(
            pairs
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect(),
        )
    }
}

fn invalid(setting: Setting, problem: String) -> Error {
    Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    }
}

fn given(raw: &RawConfig, setting: Setting) -> Result<Option<String>, Error> {
    match raw.get(setting) {
        None => Ok(None),
        Some(value) if value.trim().is_empty() => Err(Error::Empty {
            env: setting.env,
            flag: setting.flag,
        }),
        Some(value) => Ok(Some(value.trim().to_owned())),
    }
}

/// The named environment, if the workspace and the name are both given.
pub(crate) fn named(raw: &RawConfig) -> Result<Option<NamedEnvironment>, Error> {
    let workspace = given(raw, ENVIRONMENT_WORKSPACE)?;
    let name = given(raw, ACTIVE_ENVIRONMENT)?;
    let requirements = given(raw, ENVIRONMENT_REQUIREMENTS)?;
    let (workspace, name) = match (workspace, name) {
        (None, None) => {
            if requirements.is_some() {
                return Err(invalid(
                    ENVIRONMENT_REQUIREMENTS,
                    format!(
                        "requirements need a named environment: set {} and {}",
                        ACTIVE_ENVIRONMENT.env, ENVIRONMENT_WORKSPACE.env
                    ),
                ));
            }
            return Ok(None);
        }
        (Some(_), None) => {
            return Err(invalid(
                ACTIVE_ENVIRONMENT,
                format!("is required when {} is set", ENVIRONMENT_WORKSPACE.env),
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                ENVIRONMENT_WORKSPACE,
                format!("is required when {} is set", ACTIVE_ENVIRONMENT.env),
            ))
        }
        (Some(workspace), Some(name)) => (workspace, name),
    };
    check_name(&name)?;
    let workspace = check_workspace(&workspace, &name, raw.working_dir.as_deref())?;
    let requirements = match requirements {
        Some(json) => parse_requirements(&json)?,
        None => Vec::new(),
    };
    Ok(Some(NamedEnvironment {
        workspace,
        name,
        requirements,
        // Set by `Config::from_raw`, which moves `--python` here.
        python: None,
    }))
}

fn check_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let safe = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && name.len() <= MAX_NAME_CHARS;
    if safe {
        Ok(())
    } else {
        Err(invalid(
            ACTIVE_ENVIRONMENT,
            format!(
                "{:?} is not a safe environment name (1 to {MAX_NAME_CHARS} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit)",
                bounded(name)
            ),
        ))
    }
}

/// Absolute, without `.`/`..` (so the lexical comparison below means something), and outside
/// the project. Symlinks are checked again when the environment is prepared.
fn check_workspace(value: &str, name: &str, project: Option<&Path>) -> Result<PathBuf, Error> {
    let workspace = PathBuf::from(value);
    if !workspace.is_absolute() {
        return Err(invalid(
            ENVIRONMENT_WORKSPACE,
            format!("{:?} is not an absolute path", bounded(value)),
        ));
    }
    if workspace
        .components()
        .any(|component| matches!(component, Component::CurDir | Component::ParentDir))
    {
        return Err(invalid(
            ENVIRONMENT_WORKSPACE,
            format!("{:?} must not contain '.' or '..'", bounded(value)),
        ));
    }
    if let Some(project) = project {
        if workspace.starts_with(project) || project.starts_with(workspace.join(name)) {
            return Err(invalid(
                ENVIRONMENT_WORKSPACE,
                format!(
                    "{:?} must be outside the project (the working directory {:?})",
                    bounded(value),
                    bounded(&project.display().to_string())
                ),
            ));
        }
    }
    Ok(workspace)
}

fn parse_requirements(json: &str) -> Result<Vec<String>, Error> {
    let parsed: serde_json::Value = serde_json::from_str(json).map_err(|error| {
        invalid(
            ENVIRONMENT_REQUIREMENTS,
            format!("not JSON ({error}); expected an array like [\"six==1.16.0\"]"),
        )
    })?;
    let serde_json::Value::Array(items) = parsed else {
        return Err(invalid(
            ENVIRONMENT_REQUIREMENTS,
            "must be a JSON array of strings like [\"six==1.16.0\"]".to_owned(),
        ));
    };
    if items.len() > MAX_REQUIREMENTS {
        return Err(invalid(
            ENVIRONMENT_REQUIREMENTS,
            format!(
                "lists {} requirements, more than {MAX_REQUIREMENTS}",
                items.len()
            ),
        ));
    }
    let mut canonical = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Some(text) = item.as_str() else {
            return Err(invalid(
                ENVIRONMENT_REQUIREMENTS,
                format!("item {index} is not a string"),
            ));
        };
        let shown = || bounded(&url_credentials(text));
        if text.chars().count() > MAX_REQUIREMENT_CHARS {
            return Err(invalid(
                ENVIRONMENT_REQUIREMENTS,
                format!(
                    "item {index} ({:?}) is longer than {MAX_REQUIREMENT_CHARS} characters",
                    shown()
                ),
            ));
        }
        let requirement = canonical_requirement(text).map_err(|problem| {
            invalid(
                ENVIRONMENT_REQUIREMENTS,
                format!(
                    "item {index} ({:?}) is not a PEP 508 requirement: {problem}",
                    shown()
                ),
            )
        })?;
        canonical.push(requirement);
    }
    canonical.sort();
    canonical.dedup();
    Ok(canonical)
}

/// The canonical form of one PEP 508 requirement, or why it is not one.
///
/// Name: PEP 503-normalized. Extras: normalized, sorted. Version specifiers: whitespace
/// removed, sorted. URL: as given. Marker: whitespace runs collapsed to one space.
pub(crate) fn canonical_requirement(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("it is empty".to_owned());
    }
    if text.chars().any(char::is_control) {
        return Err("it contains control characters".to_owned());
    }
    if text.starts_with('-') {
        return Err("installer options are not allowed".to_owned());
    }
    let name_end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .unwrap_or(text.len());
    let name = &text[..name_end];
    let valid_name = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !valid_name {
        return Err("it does not start with a project name".to_owned());
    }
    let mut out = normalize_name(name);
    let mut rest = text[name_end..].trim_start();

    if let Some(after) = rest.strip_prefix('[') {
        let close = after
            .find(']')
            .ok_or_else(|| "its extras are not closed with ']'".to_owned())?;
        let mut extras = Vec::new();
        for extra in after[..close]
            .split(',')
            .map(str::trim)
            .filter(|extra| !extra.is_empty())
        {
            let valid = extra.starts_with(|c: char| c.is_ascii_alphanumeric())
                && extra.ends_with(|c: char| c.is_ascii_alphanumeric())
                && extra
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !valid {
                return Err(format!("{extra:?} is not an extra name"));
            }
            extras.push(normalize_name(extra));
        }
        extras.sort();
        extras.dedup();
        if !extras.is_empty() {
            out.push('[');
            out.push_str(&extras.join(","));
            out.push(']');
        }
        rest = after[close + 1..].trim_start();
    }

    let (spec, marker) = if let Some(after) = rest.strip_prefix('@') {
        // A URL requirement; a marker must be separated from the URL by whitespace.
        let after = after.trim_start();
        let (url, marker) = match after.find(char::is_whitespace) {
            Some(end) => {
                let tail = after[end..].trim_start();
                let marker = tail
                    .strip_prefix(';')
                    .ok_or_else(|| "only a '; marker' may follow the URL".to_owned())?;
                (&after[..end], Some(marker))
            }
            None => (after, None),
        };
        let scheme_ok = url.find("://").is_some_and(|at| {
            at > 0
                && url[..at]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
        if !scheme_ok {
            return Err("the part after '@' is not a URL (scheme://…)".to_owned());
        }
        (format!(" @ {url}"), marker)
    } else {
        let (spec, marker) = match rest.find(';') {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        (canonical_specifiers(spec.trim())?, marker)
    };
    out.push_str(&spec);
    if let Some(marker) = marker {
        let marker = marker.split_whitespace().collect::<Vec<_>>().join(" ");
        if marker.is_empty() {
            return Err("its marker after ';' is empty".to_owned());
        }
        out.push_str("; ");
        out.push_str(&marker);
    }
    Ok(out)
}

/// `>=1.0, <2` (optionally in parentheses) → `<2,>=1.0`.
fn canonical_specifiers(spec: &str) -> Result<String, String> {
    let spec = match spec.strip_prefix('(') {
        Some(inner) => inner
            .strip_suffix(')')
            .ok_or_else(|| "its version specifier is not closed with ')'".to_owned())?,
        None => spec,
    };
    if spec.trim().is_empty() {
        return Ok(String::new());
    }
    let mut clauses = Vec::new();
    for clause in spec.split(',') {
        let clause = clause.trim();
        let operator = ["===", "~=", "==", "!=", "<=", ">=", "<", ">"]
            .into_iter()
            .find(|operator| clause.starts_with(operator))
            .ok_or_else(|| format!("{clause:?} is not a version specifier like ==1.0"))?;
        let version = clause[operator.len()..].trim_start();
        let valid = !version.is_empty()
            && version.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '*' | '+' | '!' | '-' | '_')
            });
        if !valid {
            return Err(format!("{clause:?} has no valid version"));
        }
        clauses.push(format!("{operator}{version}"));
    }
    clauses.sort();
    clauses.dedup();
    Ok(clauses.join(","))
}

/// PEP 503: lowercase, runs of `-`, `_`, `.` become one `-`.
fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut separator = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            separator = true;
            continue;
        }
        if separator && !out.is_empty() {
            out.push('-');
        }
        separator = false;
        out.push(c.to_ascii_lowercase());
    }
    out
}

pub(crate) fn variables(raw: &RawConfig) -> Result<Variables, Error> {
    let Some(json) = given(raw, ENVIRONMENT_VARIABLES)? else {
        return Ok(Variables::default());
    };
    // Values never appear in these messages: they may be secrets.
    let parsed: serde_json::Value = serde_json::from_str(&json).map_err(|error| {
        invalid(
            ENVIRONMENT_VARIABLES,
            format!(
                "not JSON (at line {} column {}); expected an object like {{\"TASK_MODE\": \"offline\"}}",
                error.line(),
                error.column()
            ),
        )
    })?;
    let serde_json::Value::Object(map) = parsed else {
        return Err(invalid(
            ENVIRONMENT_VARIABLES,
            "must be a JSON object of strings like {\"TASK_MODE\": \"offline\"}".to_owned(),
        ));
    };
    if map.len() > MAX_VARIABLES {
        return Err(invalid(
            ENVIRONMENT_VARIABLES,
            format!("sets {} variables, more than {MAX_VARIABLES}", map.len()),
        ));
    }
    let mut variables = BTreeMap::new();
    for (key, value) in map {
        let portable = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && key.len() <= MAX_VARIABLE_NAME_CHARS;
        if !portable {
            return Err(invalid(
                ENVIRONMENT_VARIABLES,
                format!(
                    "{:?} is not a variable name (ASCII letters, digits and '_', not starting with a digit, at most {MAX_VARIABLE_NAME_CHARS})",
                    bounded(&key)
                ),
            ));
        }
        let serde_json::Value::String(value) = value else {
            return Err(invalid(
                ENVIRONMENT_VARIABLES,
                format!("the value of {key} must be a string"),
            ));
        };
        if value.contains('\0') || value.chars().count() > MAX_VARIABLE_VALUE_CHARS {
            return Err(invalid(
                ENVIRONMENT_VARIABLES,
                format!(
                    "the value of {key} must have no NUL character and at most {MAX_VARIABLE_VALUE_CHARS} characters"
                ),
            ));
        }
        variables.insert(key, value);
    }
    Ok(Variables(variables))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, PYTHON};

    fn check(input: &str, expect: Result<&str, &str>) {
        let got = canonical_requirement(input);
        assert_eq!(
            got.as_deref().map_err(String::as_str),
            expect,
            "input {input:?}"
        );
    }

    #[test]
    fn requirements_are_canonicalized() {
        check("six==1.16.0", Ok("six==1.16.0"));
        check("  Six == 1.16.0 ", Ok("six==1.16.0"));
        check("Foo_Bar.baz>=1.0 , <2", Ok("foo-bar-baz<2,>=1.0"));
        check("foo (>=1.0,<2)", Ok("foo<2,>=1.0"));
        check(
            "requests[socks, Security]>=2",
            Ok("requests[security,socks]>=2"),
        );
        check("requests[]", Ok("requests"));
        check(
            "six; python_version  >=  \"3.8\"",
            Ok("six; python_version >= \"3.8\""),
        );
        check(
            "pkg @ https://example.com/pkg-1.0.tar.gz ; sys_platform == 'linux'",
            Ok("pkg @ https://example.com/pkg-1.0.tar.gz; sys_platform == 'linux'"),
        );
        check(
            "pkg@git+https://github.com/o/r.git@v1",
            Ok("pkg @ git+https://github.com/o/r.git@v1"),
        );
        check("numpy~=1.26.0", Ok("numpy~=1.26.0"));
        check("numpy==1.*", Ok("numpy==1.*"));
    }

    #[test]
    fn non_requirements_are_refused_with_the_reason() {
        check("", Err("it is empty"));
        check(
            "-r requirements.txt",
            Err("installer options are not allowed"),
        );
        check(
            "--index-url=https://x",
            Err("installer options are not allowed"),
        );
        check("./local/path", Err("it does not start with a project name"));
        check("six\n==1", Err("it contains control characters"));
        check(
            "six 1.0",
            Err("\"1.0\" is not a version specifier like ==1.0"),
        );
        check("six==", Err("\"==\" has no valid version"));
        check(
            "six==1.0 extra",
            Err("\"==1.0 extra\" has no valid version"),
        );
        check("six[bad extra]", Err("\"bad extra\" is not an extra name"));
        check("six[x", Err("its extras are not closed with ']'"));
        check(
            "pkg @ not-a-url",
            Err("the part after '@' is not a URL (scheme://…)"),
        );
        check(
            "pkg @ https://x/p.whl junk",
            Err("only a '; marker' may follow the URL"),
        );
        check("six;", Err("its marker after ';' is empty"));
    }

    fn raw(pairs: &[(&str, &str)]) -> RawConfig {
        let mut raw = RawConfig {
            working_dir: Some(PathBuf::from("/home/ada/project")),
            ..Default::default()
        };
        for (key, value) in pairs {
            let setting = match *key {
                "workspace" => ENVIRONMENT_WORKSPACE,
                "name" => ACTIVE_ENVIRONMENT,
                "requirements" => ENVIRONMENT_REQUIREMENTS,
                "variables" => ENVIRONMENT_VARIABLES,
                other => panic!("unknown key {other}"),
            };
            raw.set(setting, *value);
        }
        raw
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        let error = Config::from_raw(&raw(pairs))
            .expect_err("invalid")
            .to_string();
        assert!(!error.contains('\n'), "one line: {error}");
        error
    }

    #[test]
    fn a_named_environment_is_parsed_with_canonical_sorted_requirements() {
        let config = Config::from_raw(&raw(&[
            ("workspace", "/srv/envs"),
            ("name", "analytics-v1.2_x"),
            (
                "requirements",
                r#"["Six==1.16.0", "iniconfig >= 2", "six==1.16.0"]"#,
            ),
            ("variables", r#"{"TASK_MODE": "offline", "_X1": ""}"#),
        ]))
        .expect("valid");
        let named = config.environment.expect("configured");
        assert_eq!(named.path(), PathBuf::from("/srv/envs/analytics-v1.2_x"));
        assert_eq!(named.requirements, ["iniconfig>=2", "six==1.16.0"]);
        let variables: Vec<_> = config.namespace.variables.iter().collect();
        assert_eq!(variables, [("TASK_MODE", "offline"), ("_X1", "")]);
        assert_eq!(
            format!("{:?}", config.namespace.variables),
            "{\"TASK_MODE\", \"_X1\"}",
            "Debug never shows values"
        );
        assert_eq!(named.python, None);
        let mut with_python = raw(&[("workspace", "/srv/envs"), ("name", "a")]);
        with_python.set(PYTHON, "/usr/bin/python3.12");
        let config = Config::from_raw(&with_python).expect("valid");
        assert_eq!(config.python, None, "not the kernel's interpreter");
        assert_eq!(
            config.environment.and_then(|named| named.python),
            Some(PathBuf::from("/usr/bin/python3.12")),
            "the named environment's base"
        );
        let plain = Config::from_raw(&raw(&[])).expect("valid");
        assert_eq!(plain.environment, None);
        assert!(plain.namespace.variables.is_empty());
    }

    #[test]
    fn every_environment_setting_is_validated_and_named() {
        let workspace = "IPYTHON_MCP_ENVIRONMENT_WORKSPACE (--environment-workspace)";
        let name = "IPYTHON_MCP_ACTIVE_ENVIRONMENT (--active-environment)";
        let requirements = "IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS (--environment-requirements)";
        let variables = "IPYTHON_MCP_ENVIRONMENT_VARIABLES (--environment-variables)";
        let cases: &[(&[(&str, &str)], String)] = &[
            (&[("workspace", "/srv/envs")], format!("invalid configuration: {name}: is required when IPYTHON_MCP_ENVIRONMENT_WORKSPACE is set")),
            (&[("name", "a")], format!("invalid configuration: {workspace}: is required when IPYTHON_MCP_ACTIVE_ENVIRONMENT is set")),
            (&[("requirements", "[]")], format!("invalid configuration: {requirements}: requirements need a named environment: set IPYTHON_MCP_ACTIVE_ENVIRONMENT and IPYTHON_MCP_ENVIRONMENT_WORKSPACE")),
            (&[("workspace", " "), ("name", "a")], format!("invalid configuration: {workspace} must not be empty")),
            (&[("workspace", "envs"), ("name", "a")], format!("invalid configuration: {workspace}: \"envs\" is not an absolute path")),
            (&[("workspace", "/srv/../home/ada/project"), ("name", "a")], format!("invalid configuration: {workspace}: \"/srv/../home/ada/project\" must not contain '.' or '..'")),
            (&[("workspace", "/home/ada/project/.envs"), ("name", "a")], format!("invalid configuration: {workspace}: \"/home/ada/project/.envs\" must be outside the project (the working directory \"/home/ada/project\")")),
            (&[("workspace", "/home/ada/project"), ("name", "a")], format!("invalid configuration: {workspace}: \"/home/ada/project\" must be outside the project (the working directory \"/home/ada/project\")")),
            (&[("workspace", "/home"), ("name", "ada")], format!("invalid configuration: {workspace}: \"/home\" must be outside the project (the working directory \"/home/ada/project\")")),
            (&[("workspace", "/srv/envs"), ("name", "../escape")], format!("invalid configuration: {name}: \"../escape\" is not a safe environment name (1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit)")),
            (&[("workspace", "/srv/envs"), ("name", ".hidden")], format!("invalid configuration: {name}: \".hidden\" is not a safe environment name (1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit)")),
            (&[("workspace", "/srv/envs"), ("name", "a/b")], format!("invalid configuration: {name}: \"a/b\" is not a safe environment name (1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit)")),
            (&[("workspace", "/srv/envs"), ("name", "a"), ("requirements", "six")], format!("invalid configuration: {requirements}: not JSON (expected value at line 1 column 1); expected an array like [\"six==1.16.0\"]")),
            (&[("workspace", "/srv/envs"), ("name", "a"), ("requirements", "{}")], format!("invalid configuration: {requirements}: must be a JSON array of strings like [\"six==1.16.0\"]")),
            (&[("workspace", "/srv/envs"), ("name", "a"), ("requirements", "[1]")], format!("invalid configuration: {requirements}: item 0 is not a string")),
            (&[("workspace", "/srv/envs"), ("name", "a"), ("requirements", r#"["six", "-e ."]"#)], format!("invalid configuration: {requirements}: item 1 (\"-e .\") is not a PEP 508 requirement: installer options are not allowed")),
            (&[("workspace", "/srv/envs"), ("name", "a"), ("requirements", r#"["p @ https://u:s3cret@h/p.whl junk"]"#)], format!("invalid configuration: {requirements}: item 0 (\"p @ https://***@h/p.whl junk\") is not a PEP 508 requirement: only a '; marker' may follow the URL")),
            (&[("variables", "[]")], format!("invalid configuration: {variables}: must be a JSON object of strings like {{\"TASK_MODE\": \"offline\"}}")),
            (&[("variables", "{\"A\": ")], format!("invalid configuration: {variables}: not JSON (at line 1 column 5); expected an object like {{\"TASK_MODE\": \"offline\"}}")),
            (&[("variables", r#"{"A": 1}"#)], format!("invalid configuration: {variables}: the value of A must be a string")),
            (&[("variables", r#"{"1A": "x"}"#)], format!("invalid configuration: {variables}: \"1A\" is not a variable name (ASCII letters, digits and '_', not starting with a digit, at most 128)")),
            (&[("variables", r#"{"A=B": "x"}"#)], format!("invalid configuration: {variables}: \"A=B\" is not a variable name (ASCII letters, digits and '_', not starting with a digit, at most 128)")),
            (&[("variables", r#"{"A": "x\u0000y"}"#)], format!("invalid configuration: {variables}: the value of A must have no NUL character and at most 32768 characters")),
        ];
        for (pairs, expect) in cases {
            assert_eq!(&error(pairs), expect, "{pairs:?}");
        }
        let too_many = format!("[{}]", vec!["\"six\""; MAX_REQUIREMENTS + 1].join(","));
        assert_eq!(
            error(&[
                ("workspace", "/srv/envs"),
                ("name", "a"),
                ("requirements", &too_many)
            ]),
            format!("invalid configuration: {requirements}: lists 201 requirements, more than 200")
        );
        let too_long = format!("[\"six=={}\"]", "1".repeat(MAX_REQUIREMENT_CHARS));
        assert!(error(&[
            ("workspace", "/srv/envs"),
            ("name", "a"),
            ("requirements", &too_long)
        ])
        .ends_with("is longer than 1000 characters"));
        let long_name = "a".repeat(MAX_NAME_CHARS + 1);
        assert!(error(&[("workspace", "/srv/envs"), ("name", &long_name)])
            .contains("is not a safe environment name"));
        // A secret value in a malformed object is never echoed.
        let secret = error(&[("variables", r#"{"TOKEN": ["hunter22"]}"#)]);
        assert!(!secret.contains("hunter22"), "{secret}");
    }
}

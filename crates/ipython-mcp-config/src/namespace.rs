//! What every kernel gets at start: library paths, preloaded modules, module aliases and
//! environment variables.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::environment::{self, Variables};
use crate::error::Error;
use crate::parse::bounded;
use crate::settings::{RawConfig, Setting, LIBRARY_PATHS, MODULE_ALIASES, PRELOAD_MODULES};

/// What every kernel gets at start, after a reset and after a replacement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespace {
    /// Trusted directories prepended to `sys.path`.
    pub library_paths: Vec<PathBuf>,
    /// Modules imported and bound under their top-level name.
    pub preload_modules: Vec<String>,
    /// Module → the name it is bound to.
    pub module_aliases: BTreeMap<String, String>,
    /// Environment variables set in the kernel process, so they exist before preloads run.
    pub variables: Variables,
}

/// Library paths, preloads and aliases: syntax only (the kernel reports what fails to import).
pub(crate) fn namespace(raw: &RawConfig) -> Result<Namespace, Error> {
    let invalid = |setting: Setting, problem: String| Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    };
    let mut result = Namespace::default();
    if let Some(paths) = raw.get(LIBRARY_PATHS) {
        for path in paths
            .split(':')
            .map(str::trim)
            .filter(|path| !path.is_empty())
        {
            if !path.starts_with('/') {
                return Err(invalid(
                    LIBRARY_PATHS,
                    format!("{:?} is not an absolute path", bounded(path)),
                ));
            }
            result.library_paths.push(PathBuf::from(path));
        }
    }
    if let Some(modules) = raw.get(PRELOAD_MODULES) {
        for module in modules
            .split(',')
            .map(str::trim)
            .filter(|module| !module.is_empty())
        {
            if !is_module_name(module) {
                return Err(invalid(
                    PRELOAD_MODULES,
                    format!("{:?} is not a module name", bounded(module)),
                ));
            }
            result.preload_modules.push(module.to_owned());
        }
    }
    if let Some(aliases) = raw.get(MODULE_ALIASES) {
        let parsed: serde_json::Value = serde_json::from_str(aliases)
            .map_err(|error| invalid(MODULE_ALIASES, format!("not JSON ({error})")))?;
        let serde_json::Value::Object(map) = parsed else {
            return Err(invalid(
                MODULE_ALIASES,
                "must be a JSON object like {\"numpy\": \"np\"}".to_owned(),
            ));
        };
        for (module, binding) in map {
            let Some(binding) = binding.as_str() else {
                return Err(invalid(
                    MODULE_ALIASES,
                    format!("the alias of {:?} must be a string", bounded(&module)),
                ));
            };
            if !is_module_name(&module) {
                return Err(invalid(
                    MODULE_ALIASES,
                    format!("{:?} is not a module name", bounded(&module)),
                ));
            }
            if !is_identifier(binding) || binding.starts_with('_') {
                return Err(invalid(
                    MODULE_ALIASES,
                    format!(
                        "{:?} is not a usable name (an identifier not starting with _)",
                        bounded(binding)
                    ),
                ));
            }
            result.module_aliases.insert(module, binding.to_owned());
        }
    }
    result.variables = environment::variables(raw)?;
    Ok(result)
}

pub(crate) fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

pub(crate) fn is_module_name(text: &str) -> bool {
    text.split('.').all(is_identifier)
}

//! Parsing one setting's raw text into its typed value, or an [`Error`] naming the setting.

use std::path::PathBuf;
use std::time::Duration;

use crate::*;

pub(crate) fn transport(raw: &RawConfig) -> Result<Transport, Error> {
    match raw.get(TRANSPORT).unwrap_or(TRANSPORT.default).trim() {
        "stdio" => Ok(Transport::Stdio),
        // jupymcp's name for the same transport, so its users keep their command line.
        "http" | "streamable-http" => Ok(Transport::Http),
        other => Err(Error::Invalid {
            env: TRANSPORT.env,
            flag: TRANSPORT.flag,
            problem: format!(
                "must be stdio or http (also spelled streamable-http), got {:?}",
                bounded(other)
            ),
        }),
    }
}

pub(crate) fn structured_output(raw: &RawConfig) -> Result<StructuredOutput, Error> {
    match raw
        .get(STRUCTURED_OUTPUT)
        .unwrap_or(STRUCTURED_OUTPUT.default)
        .trim()
    {
        "auto" => Ok(StructuredOutput::Auto),
        "always" => Ok(StructuredOutput::Always),
        other => Err(Error::Invalid {
            env: STRUCTURED_OUTPUT.env,
            flag: STRUCTURED_OUTPUT.flag,
            problem: format!("must be auto or always, got {:?}", bounded(other)),
        }),
    }
}

pub(crate) fn http(raw: &RawConfig) -> Result<Http, Error> {
    let invalid = |setting: Setting, problem: String| Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    };
    let allow_remote = match raw.get(ALLOW_REMOTE).unwrap_or(ALLOW_REMOTE.default).trim() {
        "true" | "1" | "yes" => true,
        "false" | "0" | "no" => false,
        other => {
            return Err(invalid(
                ALLOW_REMOTE,
                format!("must be true or false, got {:?}", bounded(other)),
            ))
        }
    };
    let host = match raw.get(HOST).unwrap_or(HOST.default).trim() {
        "localhost" => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        text => text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .map_err(|_| {
                invalid(
                    HOST,
                    format!(
                        "must be an IP address such as 127.0.0.1 or ::1, got {:?}",
                        bounded(text)
                    ),
                )
            })?,
    };
    if !host.is_loopback() && !allow_remote {
        return Err(invalid(
            HOST,
            format!(
                "{host} is not a loopback address; other machines could connect, so this needs --allow-remote ({}=true)",
                ALLOW_REMOTE.env
            ),
        ));
    }
    let port = raw.get(PORT).unwrap_or(PORT.default).trim();
    let port = port.parse::<u16>().map_err(|_| {
        invalid(
            PORT,
            format!("must be a TCP port (0 to 65535), got {:?}", bounded(port)),
        )
    })?;
    let token = match (raw.get(HTTP_TOKEN), raw.get(HTTP_TOKEN_FILE)) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                HTTP_TOKEN,
                format!("set either it or {}, not both", HTTP_TOKEN_FILE.env),
            ))
        }
        (Some(text), None) => {
            TokenSource::Given(Token::parse(text).map_err(|problem| invalid(HTTP_TOKEN, problem))?)
        }
        (None, Some(_)) => match path(raw, HTTP_TOKEN_FILE)? {
            Some(file) => TokenSource::File(file),
            None => TokenSource::Generate,
        },
        (None, None) => TokenSource::Generate,
    };
    let list = |text: Option<&str>| -> Vec<String> {
        text.into_iter()
            .flat_map(|text| text.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let allowed_origins = match raw.get(HTTP_ALLOWED_ORIGINS) {
        None => Http::LOOPBACK_ORIGINS.map(str::to_owned).to_vec(),
        Some(given) => {
            let origins = list(Some(given));
            if let Some(bad) = origins
                .iter()
                .find(|origin| !(origin.contains("://") || origin.as_str() == "null"))
            {
                return Err(invalid(
                    HTTP_ALLOWED_ORIGINS,
                    format!(
                        "{:?} is not an origin like http://localhost:3000",
                        bounded(bad)
                    ),
                ));
            }
            origins
        }
    };
    let mut allowed_hosts = Http::LOOPBACK_HOSTS.map(str::to_owned).to_vec();
    if !host.is_loopback() && !host.is_unspecified() {
        allowed_hosts.push(host.to_string());
    }
    allowed_hosts.extend(list(raw.get(HTTP_ALLOWED_HOSTS)));
    Ok(Http {
        host,
        port,
        token,
        allowed_origins,
        allowed_hosts,
        allow_remote,
    })
}

/// The value given for `setting`, or its default from [`SETTINGS`].
pub(crate) fn given_or_default(raw: &RawConfig, setting: Setting) -> &str {
    raw.get(setting).unwrap_or(setting.default)
}

pub(crate) fn positive_int(raw: &RawConfig, setting: Setting) -> Result<usize, Error> {
    let value = given_or_default(raw, setting);
    match value.trim().parse::<usize>() {
        Ok(parsed) if parsed > 0 => Ok(parsed),
        _ => Err(Error::NotPositiveInteger {
            env: setting.env,
            flag: setting.flag,
            value: bounded(value),
        }),
    }
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

/// A whole percentage, 0 to 100.
pub(crate) fn percent(raw: &RawConfig, setting: Setting) -> Result<usize, Error> {
    let value = given_or_default(raw, setting);
    match value.trim().parse::<usize>() {
        Ok(parsed) if parsed <= 100 => Ok(parsed),
        _ => Err(Error::Invalid {
            env: setting.env,
            flag: setting.flag,
            problem: format!(
                "must be a whole number from 0 to 100, got {:?}",
                bounded(value)
            ),
        }),
    }
}

/// For counts where zero means "off".
pub(crate) fn non_negative_int(raw: &RawConfig, setting: Setting) -> Result<usize, Error> {
    let value = given_or_default(raw, setting);
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| Error::NotNonNegativeInteger {
            env: setting.env,
            flag: setting.flag,
            value: bounded(value),
        })
}

/// Seconds may be fractional ("0.5"); they must be positive, finite and fit a `Duration`.
pub(crate) fn seconds(raw: &RawConfig, setting: Setting) -> Result<Duration, Error> {
    let value = given_or_default(raw, setting);
    let error = || Error::NotPositiveSeconds {
        env: setting.env,
        flag: setting.flag,
        value: bounded(value),
    };
    let parsed: f64 = value.trim().parse().map_err(|_| error())?;
    if !(parsed.is_finite() && parsed > 0.0) {
        return Err(error());
    }
    Duration::try_from_secs_f64(parsed).map_err(|_| error())
}

/// A path setting; its table default is prose ("none", "found (see README)"), never a path.
pub(crate) fn path(raw: &RawConfig, setting: Setting) -> Result<Option<PathBuf>, Error> {
    match raw.get(setting) {
        None => Ok(None),
        Some(value) if value.trim().is_empty() => Err(Error::Empty {
            env: setting.env,
            flag: setting.flag,
        }),
        Some(value) => Ok(Some(PathBuf::from(value))),
    }
}

/// A path that must name an existing directory (checked once, at start-up).
pub(crate) fn existing_directory(
    raw: &RawConfig,
    setting: Setting,
) -> Result<Option<PathBuf>, Error> {
    let found = path(raw, setting)?;
    match &found {
        Some(directory) if !directory.is_dir() => Err(Error::Invalid {
            env: setting.env,
            flag: setting.flag,
            problem: format!(
                "{:?} is not an existing directory",
                bounded(&directory.display().to_string())
            ),
        }),
        _ => Ok(found),
    }
}

/// Keeps a bad value short in the one-line error.
pub(crate) fn bounded(value: &str) -> String {
    ipython_mcp_text::shorten(value, 64)
}

//! Parsing one setting's raw text into its typed value, or an [`Error`] naming the setting.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;
use crate::settings::{RawConfig, Setting};

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

/// A size in bytes: plain digits, or a number with a binary unit (`512MiB`, `4GiB`, `1.5GiB`);
/// `none` (the default) for no size at all. At least `minimum`.
pub(crate) fn byte_size(
    raw: &RawConfig,
    setting: Setting,
    minimum: u64,
) -> Result<Option<u64>, Error> {
    let value = given_or_default(raw, setting).trim();
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let error = |problem: String| Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    };
    let units: [(&str, u64); 5] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| {
            let lower = value.to_ascii_lowercase();
            lower
                .ends_with(&unit.to_ascii_lowercase())
                .then(|| (value[..value.len() - unit.len()].trim(), *scale))
        })
        .unwrap_or((value, 1));
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|whole| whole.checked_mul(scale))
        .or_else(|| {
            let fraction = number.parse::<f64>().ok()?;
            let bytes = fraction * scale as f64;
            (fraction.is_finite() && fraction > 0.0 && bytes < u64::MAX as f64)
                .then_some(bytes as u64)
        })
        .ok_or_else(|| {
            error(format!(
                "must be a size in bytes, e.g. 536870912, 512MiB or 4GiB, got {:?}",
                bounded(value)
            ))
        })?;
    if bytes < minimum {
        return Err(error(format!(
            "must be at least {} MiB (a kernel needs that much to start), got {:?}",
            minimum >> 20,
            bounded(value)
        )));
    }
    Ok(Some(bytes))
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

//! Bearer credentials at the HTTP door, below both ways of checking them (one token in
//! `http.rs`, principals in `principals.rs`): reading the header, the `401` answer, and
//! reading a file of secrets (warning when others can read it).

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse as _, Response};

/// The credentials of an `Authorization: Bearer` header, if the request has one.
pub fn token(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim())
}

/// The answer to a request without a token the server accepts (logged without the token).
/// With an OAuth issuer, the challenge points at the protected resource metadata (RFC 9728),
/// where a client finds the issuer to get a token from.
pub fn unauthorized(
    request: &Request,
    had_credentials: bool,
    oauth: Option<&ipython_mcp_config::OAuth>,
) -> Response {
    tracing::info!(
        method = %request.method(),
        path = request.uri().path(),
        credentials = if had_credentials { "wrong" } else { "missing" },
        "HTTP request refused: 401"
    );
    let challenge = match oauth {
        None => "Bearer".to_owned(),
        Some(oauth) => {
            let metadata = crate::oauth::metadata_url(&oauth.resource);
            match had_credentials {
                true => format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\""),
                false => format!("Bearer resource_metadata=\"{metadata}\""),
            }
        }
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        format!(
            "401 Unauthorized: send 'Authorization: Bearer <token>' (the token ipython-mcp printed at start, or {})\n",
            ipython_mcp_config::HTTP_TOKEN.env
        ),
    )
        .into_response()
}

/// Warns once when other users can read a file holding secrets.
fn warn_if_readable_by_others(path: &std::path::Path) {
    let readable_by_others = std::fs::metadata(path)
        .map(|metadata| {
            std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o077 != 0
        })
        .unwrap_or(false);
    if readable_by_others {
        eprintln!(
            "ipython-mcp: warning: {} can be read by other users; chmod 600 it",
            path.display()
        );
    }
}

/// Reads a file of secrets named by `setting` (a token file, the principals file), before
/// anything starts: a file that cannot be read is a one-line configuration error naming the
/// setting, and one that others can read gets a warning.
pub fn read_secrets(
    setting: ipython_mcp_config::Setting,
    path: &std::path::Path,
) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        format!(
            "invalid configuration: {} (--{}): cannot read {}: {error}",
            setting.env,
            setting.flag,
            path.display()
        )
    })?;
    warn_if_readable_by_others(path);
    Ok(text)
}

//! The HTTP client of streamable-HTTP upstreams, `https://` included, and what a failed TLS
//! handshake says.
//!
//! TLS is rustls with the ring provider (the one the Jupyter client and ZeroMQ signing already
//! build; reqwest's own default would add aws-lc, a second crypto library) and the platform's
//! certificate verifier. `SSL_CERT_FILE` and `SSL_CERT_DIR` name private CAs, trusted in
//! addition to the platform's roots.
//!
//! reqwest is built with `rustls-no-provider`: a reqwest client built without a preconfigured
//! TLS configuration (as `reqwest::Client::new()` does) panics unless a process-wide rustls
//! provider is installed first. Every client here is preconfigured; [`install_crypto_provider`]
//! is for a process (the server, a test, a bench) that builds others.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::{CertificateError, RootCertStore};

/// How many same-origin redirects one request may follow.
const MAX_REDIRECTS: usize = 10;

/// Makes ring the process's default rustls provider (once; a provider already installed stays),
/// so that any reqwest client of the process can be built.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for the upstream at `url`. `https://` gets the platform's roots and the private CAs
/// of `SSL_CERT_FILE`/`SSL_CERT_DIR`, read once per process; `http://` needs none of it (and so
/// works where the system has no CA store at all).
pub(crate) fn client(url: &str) -> Result<reqwest::Client, String> {
    let tls = if url.starts_with("https://") {
        static VERIFIED: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
        VERIFIED.get_or_init(verified_config).clone()?
    } else {
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("cannot set up TLS: {error}"))?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth()
    };
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        // An idle pooled connection whose last response was not read to its end stalls the next
        // request by TCP's delayed acknowledgement (about 40 ms): rmcp's own client pools none
        // either.
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|error| format!("cannot build the HTTP client: {error}"))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn verified_config() -> Result<rustls::ClientConfig, String> {
    let verifier =
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots()?, provider())
            .map_err(|error| format!("cannot set up TLS certificate verification: {error}"))?;
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot set up TLS: {error}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

/// The certificates of `SSL_CERT_FILE` and `SSL_CERT_DIR` (the directories separated as in
/// `PATH`), refused with the variable and path when one cannot be read or holds none. Where the
/// platform verifier itself reads its roots from these variables instead of the system's store
/// (Linux and the other Unixes but Apple's), the system's store is added back, so a private CA
/// adds to the public roots instead of replacing them.
fn extra_roots() -> Result<Vec<CertificateDer<'static>>, String> {
    let file = std::env::var_os("SSL_CERT_FILE")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let dirs: Vec<PathBuf> = std::env::var_os("SSL_CERT_DIR")
        .map(|value| {
            std::env::split_paths(&value)
                .filter(|dir| !dir.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    roots_from(file.as_deref(), &dirs)
}

/// [`extra_roots`] of these values of `SSL_CERT_FILE` and `SSL_CERT_DIR`.
fn roots_from(
    file: Option<&Path>,
    dirs: &[PathBuf],
) -> Result<Vec<CertificateDer<'static>>, String> {
    let mut roots = Vec::new();
    if let Some(file) = file {
        roots.extend(certificates("SSL_CERT_FILE", Some(file), None)?);
    }
    for dir in dirs {
        roots.extend(certificates("SSL_CERT_DIR", None, Some(dir))?);
    }
    #[cfg(all(unix, not(target_vendor = "apple"), not(target_os = "android")))]
    if !roots.is_empty() {
        for dir in openssl_probe::candidate_cert_dirs() {
            let found = rustls_native_certs::load_certs_from_paths(None, Some(dir));
            // The platform verifier refuses an extra root it cannot parse, where it skips a
            // system one: only what parses is added back.
            roots.extend(
                found
                    .certs
                    .into_iter()
                    .filter(|certificate| RootCertStore::empty().add(certificate.clone()).is_ok()),
            );
        }
    }
    Ok(roots)
}

/// The certificates of one file or directory a variable names.
fn certificates(
    variable: &str,
    file: Option<&Path>,
    dir: Option<&Path>,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let path = file.or(dir).unwrap_or(Path::new("")).display();
    let found = rustls_native_certs::load_certs_from_paths(file, dir);
    if let Some(error) = found.errors.first() {
        return Err(format!("{variable} {path}: {error}"));
    }
    if found.certs.is_empty() && file.is_some() {
        return Err(format!("{variable} {path}: no PEM certificate in it"));
    }
    for certificate in &found.certs {
        if let Err(error) = RootCertStore::empty().add(certificate.clone()) {
            return Err(format!(
                "{variable} {path}: a certificate is not valid: {error}"
            ));
        }
    }
    Ok(found.certs)
}

/// rmcp's policy: only 307 and 308 (which keep the method and body) to the same origin (which
/// gets the session id and configured headers), at most [`MAX_REDIRECTS`] times.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|original| original.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

type HttpError = rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>;

/// What a failed connection to `url` says when its cause is the server's certificate: the host
/// and the reason in words, or `None` for any other failure.
fn certificate_problem(url: &str, error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(rustls::Error::InvalidCertificate(reason)) =
            error.downcast_ref::<rustls::Error>()
        {
            let host = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|uri| uri.host().map(str::to_owned))
                .unwrap_or_else(|| url.to_owned());
            return Some(format!(
                "the TLS certificate of {host} is not accepted: {}",
                explained(reason)
            ));
        }
        current = cause(error);
    }
    None
}

/// Why connecting to `url` failed: the certificate's fault in words, or the error and its
/// deepest cause (rmcp's message alone says "error sending request" and not why).
pub(crate) fn failure(url: &str, error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(problem) = certificate_problem(url, error) {
        return problem;
    }
    let mut said = error.to_string();
    let mut deepest = None;
    let mut current = cause(error);
    while let Some(error) = current {
        deepest = Some(error);
        current = cause(error);
    }
    if let Some(deepest) = deepest.map(ToString::to_string) {
        if !said.contains(&deepest) {
            said.push_str(": ");
            said.push_str(&deepest);
        }
    }
    said
}

/// The next error in the chain, through the wrappers (rmcp's, io's) whose `source` skips the
/// error they carry.
fn cause<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
        error.downcast_ref()
    {
        return Some(error);
    }
    if let Some(HttpError::Client(error)) = error.downcast_ref() {
        return Some(error);
    }
    if let Some(rmcp::transport::worker::WorkerQuitReason::Fatal { error, .. }) =
        error.downcast_ref::<rmcp::transport::worker::WorkerQuitReason<HttpError>>()
    {
        return Some(error);
    }
    if let Some(inner) = error
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        return Some(inner);
    }
    error.source()
}

fn explained(reason: &CertificateError) -> String {
    match reason {
        CertificateError::UnknownIssuer => "it is not issued by a trusted certificate authority (for a private CA, name its certificate in SSL_CERT_FILE or SSL_CERT_DIR)".to_owned(),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "it has expired".to_owned()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "it is not valid yet (is this machine's clock right?)".to_owned()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "it is not valid for this host name".to_owned()
        }
        CertificateError::Revoked => "it has been revoked".to_owned(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_error_says_the_host_and_the_reason_through_its_wrappers() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let wrapped = std::io::Error::other(tls);
        let said = failure("https://mcp.example.com:8443/mcp", &wrapped);
        assert!(
            said.contains("mcp.example.com") && said.contains("not issued by a trusted"),
            "{said}"
        );
        let refused = std::io::Error::other("connection refused");
        let said = failure("https://h/", &std::io::Error::other(refused));
        assert!(
            !said.contains("certificate") && said.contains("connection refused"),
            "{said}"
        );
    }

    /// A self-signed CA certificate, valid until 2125.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBQDCB5qADAgECAgEBMAoGCCqGSM49BAMCMB4xHDAaBgNVBAMME2lweXRob24t
bWNwIHRlc3QgQ0EwIBcNMjUwMTAxMDAwMDAwWhgPMjEyNTAxMDEwMDAwMDBaMB4x
HDAaBgNVBAMME2lweXRob24tbWNwIHRlc3QgQ0EwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQXl7W+FvNCYfRnWHcXV7Z6WLmmIISj5vlLr8wQnJsZxjQsvc3pZbol
Tu7S9YxNkmT3LQ9JaXDW6HmPLwm0iesToxMwETAPBgNVHRMBAf8EBTADAQH/MAoG
CCqGSM49BAMCA0kAMEYCIQDXinT8I4tGqnyE6S7YVEbIyyuUxhP6iB70dENXqF7A
LgIhAJ/ejU/6QHTaxsElqZR6FxYsVffAu+dxqeoT08eP6yc1
-----END CERTIFICATE-----
";

    #[test]
    fn a_private_ca_adds_to_the_platform_s_roots_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, CA).expect("ca");
        let roots = roots_from(Some(&ca), &[]).expect("roots");
        use rustls::pki_types::pem::PemObject as _;
        let ca_der = CertificateDer::pem_slice_iter(CA.as_bytes())
            .next()
            .expect("a certificate")
            .expect("parses");
        assert!(roots.contains(&ca_der));
        // Here the platform verifier reads only the variables' roots when they are set: the
        // system's store is added back (CI's Linux has one).
        #[cfg(target_os = "linux")]
        assert!(roots.len() > 1, "the system's roots are kept");
        let in_dir = roots_from(None, &[dir.path().to_owned()]).expect("roots");
        assert!(in_dir.contains(&ca_der));

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("empty");
        let missing = dir.path().join("missing.pem");
        for (file, expected) in [(&empty, "no PEM certificate"), (&missing, "missing.pem")] {
            let error = roots_from(Some(file), &[]).expect_err("refused");
            assert!(
                error.starts_with("SSL_CERT_FILE ") && error.contains(expected),
                "{error}"
            );
        }
        let error = roots_from(None, &[missing]).expect_err("refused");
        assert!(error.starts_with("SSL_CERT_DIR "), "{error}");
    }

    #[test]
    fn plain_http_needs_no_certificate_store() {
        // Built however the system's store looks, and without a process-wide provider.
        client("http://127.0.0.1:1/mcp").expect("a client");
    }
}

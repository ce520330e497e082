//! `notebook:///{+path}` URIs: an empty authority and an RFC 3986 path whose segments are the
//! workspace-relative path's components, UTF-8 percent-encoded (everything but the unreserved
//! characters). Decoding is the exact inverse; a malformed escape, an encoded `/`, a query or a
//! fragment is refused, and the decoded path is then checked like any other notebook path.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use ipython_mcp_text::shorten;

use crate::error::Error;

pub const URI_PREFIX: &str = "notebook:///";

/// RFC 3986 unreserved characters stay; everything else is encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The URI of a (checked, relative) notebook path.
pub fn uri_for_path(relative: &str) -> String {
    let segments: Vec<String> = relative
        .split('/')
        .map(|segment| utf8_percent_encode(segment, SEGMENT).to_string())
        .collect();
    format!("{URI_PREFIX}{}", segments.join("/"))
}

/// The relative path a `notebook:///` URI names (still to be checked by `Workspace::resolve`).
pub fn path_from_uri(uri: &str) -> Result<String, Error> {
    let invalid = |reason: &str| Error::InvalidPath {
        path: shorten(uri, 200),
        reason: reason.to_owned(),
    };
    let Some(encoded) = uri.strip_prefix(URI_PREFIX) else {
        return Err(invalid(
            "a notebook URI starts with notebook:/// (empty authority)",
        ));
    };
    if encoded.contains(['?', '#']) {
        return Err(invalid("a notebook URI has no query or fragment"));
    }
    let bytes = encoded.as_bytes();
    for (at, byte) in bytes.iter().enumerate() {
        if *byte == b'%' {
            let valid = bytes
                .get(at + 1..at + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit));
            if !valid {
                return Err(invalid("malformed percent-encoding"));
            }
        } else if !(byte.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(byte)) {
            return Err(invalid(
                "characters outside RFC 3986 must be percent-encoded",
            ));
        }
    }
    let mut segments = Vec::new();
    for segment in encoded.split('/') {
        let decoded = percent_decode_str(segment)
            .decode_utf8()
            .map_err(|_| invalid("the percent-encoding is not UTF-8"))?;
        if decoded.contains('/') {
            return Err(invalid("an encoded '/' (%2F) inside a path segment"));
        }
        segments.push(decoded.into_owned());
    }
    Ok(segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_spaces_unicode_and_reserved_characters() {
        let check = |path: &str, uri: &str| {
            assert_eq!(uri_for_path(path), uri);
            assert_eq!(path_from_uri(uri).expect("valid"), path);
        };
        check(
            "nested folder/分析.ipynb",
            "notebook:///nested%20folder/%E5%88%86%E6%9E%90.ipynb",
        );
        check("a#b?c%d.ipynb", "notebook:///a%23b%3Fc%25d.ipynb");
        check("plain-name_1.~x.ipynb", "notebook:///plain-name_1.~x.ipynb");
    }

    #[test]
    fn malformed_uris_are_refused() {
        for bad in [
            "notebook://host/x.ipynb",
            "file:///x.ipynb",
            "notebook:///x%2.ipynb",
            "notebook:///x%zz.ipynb",
            "notebook:///a%2Fb.ipynb",
            "notebook:///x.ipynb?q=1",
            "notebook:///x.ipynb#frag",
            "notebook:///sp ace.ipynb",
            "notebook:///%FF.ipynb",
        ] {
            assert!(path_from_uri(bad).is_err(), "{bad}");
        }
    }
}

//! A `multipart/form-data` body (RFC 7578), built by hand for the one
//! request that needs it: deploying a handler (a manifest part and a module
//! part). Parts are bytes; the boundary is random and checked against the
//! content, so no part can end the body early.

use std::fmt::Write as _;

/// One part of the form.
#[derive(Debug)]
pub(crate) struct Part<'a> {
    /// The form field name, e.g. `manifest`.
    pub(crate) name: &'a str,
    /// The file name sent with it (the server may ignore it).
    pub(crate) filename: &'a str,
    /// Its media type, e.g. `application/toml`.
    pub(crate) content_type: &'a str,
    /// Its content.
    pub(crate) bytes: &'a [u8],
}

/// An encoded body and the `Content-Type` header that goes with it.
#[derive(Debug)]
pub(crate) struct Multipart {
    /// `multipart/form-data; boundary=…`.
    pub(crate) content_type: String,
    /// The encoded parts.
    pub(crate) body: Vec<u8>,
}

/// Encodes `parts` with a fresh random boundary.
pub(crate) fn encode(parts: &[Part<'_>]) -> Multipart {
    loop {
        let boundary = format!("rheo-{:032x}", rand::random::<u128>());
        if let Some(encoded) = encode_with(parts, &boundary) {
            return encoded;
        }
    }
}

/// Encodes `parts` with `boundary`; `None` when the boundary occurs in a
/// part (then another one must be chosen).
fn encode_with(parts: &[Part<'_>], boundary: &str) -> Option<Multipart> {
    let delimiter = format!("--{boundary}");
    if parts
        .iter()
        .any(|p| contains(p.bytes, delimiter.as_bytes()))
    {
        return None;
    }
    let mut body = Vec::with_capacity(parts.iter().map(|p| p.bytes.len() + 200).sum());
    for part in parts {
        let mut head = String::new();
        let _ = write!(
            head,
            "{delimiter}\r\n\
             Content-Disposition: form-data; name=\"{}\"; filename=\"{}\"\r\n\
             Content-Type: {}\r\n\r\n",
            quoted(part.name),
            quoted(part.filename),
            part.content_type
        );
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(part.bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("{delimiter}--\r\n").as_bytes());
    Some(Multipart {
        content_type: format!("multipart/form-data; boundary={boundary}"),
        body,
    })
}

/// A header parameter value safe inside double quotes (RFC 7578 §4.2
/// percent-encodes `"`; CR and LF would end the header).
fn quoted(value: &str) -> String {
    value
        .replace('"', "%22")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(manifest: &'a [u8], module: &'a [u8]) -> [Part<'a>; 2] {
        [
            Part {
                name: "manifest",
                filename: "echo.toml",
                content_type: "application/toml",
                bytes: manifest,
            },
            Part {
                name: "module",
                filename: "echo.wasm",
                content_type: "application/wasm",
                bytes: module,
            },
        ]
    }

    #[test]
    fn parts_are_framed_by_the_boundary() {
        let encoded = encode_with(&parts(b"stream = \"s\"", b"\0asm"), "XYZ").unwrap();
        assert_eq!(encoded.content_type, "multipart/form-data; boundary=XYZ");
        let expected = b"--XYZ\r\n\
            Content-Disposition: form-data; name=\"manifest\"; filename=\"echo.toml\"\r\n\
            Content-Type: application/toml\r\n\r\n\
            stream = \"s\"\r\n\
            --XYZ\r\n\
            Content-Disposition: form-data; name=\"module\"; filename=\"echo.wasm\"\r\n\
            Content-Type: application/wasm\r\n\r\n\
            \0asm\r\n\
            --XYZ--\r\n";
        assert_eq!(encoded.body, expected.to_vec());
    }

    #[test]
    fn a_boundary_found_in_the_content_is_not_used() {
        assert!(encode_with(&parts(b"a --XYZ b", b""), "XYZ").is_none());
        let encoded = encode(&parts(b"--rheo-", b"\r\n--"));
        let boundary = encoded.content_type.split("boundary=").nth(1).unwrap();
        assert!(boundary.starts_with("rheo-") && boundary.len() == 37);
    }

    #[test]
    fn quotes_and_line_breaks_cannot_escape_a_header() {
        assert_eq!(quoted("a\"b\r\nc"), "a%22b%0D%0Ac");
    }
}

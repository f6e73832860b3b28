//! Backend URLs as they may be shown: in a log line, an error message, a
//! CLI answer. A URL can carry a password in two places, the user info
//! (`postgres://rheo:s3cret@db/x`) and a query parameter
//! (`postgres://rheo@db/x?password=s3cret`); both are masked. See
//! docs/backends.md#secrets-in-backend-urls.

/// `url` with every secret in it replaced by `***`.
///
/// It errs on the side of hiding: the user info runs to the last `@`
/// (a password may hold an unescaped `@`, `/` or `?`), so a URL whose
/// query holds an `@` loses its host from the shown text rather than risk
/// showing a password. A username alone is kept.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // No scheme separator: still `user:password@host` if it has the shape.
        return match url.rfind('@') {
            Some(at) if url[..at].contains(':') => {
                let user = url[..at].split(':').next().unwrap_or_default();
                format!("{user}:***@{}", mask_parameters(&url[at + 1..]))
            }
            _ => mask_parameters(url),
        };
    };
    let mut shown = format!("{scheme}://");
    let tail = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.split_once(':') {
                Some((user, _)) => {
                    shown.push_str(user);
                    shown.push_str(":***@");
                }
                None => {
                    shown.push_str(userinfo);
                    shown.push('@');
                }
            }
            &rest[at + 1..]
        }
        None => rest,
    };
    shown.push_str(&mask_parameters(tail));
    shown
}

/// `text` (an error message, a log line) with every URL in it passed
/// through [`redact_url`]: a URL runs from its scheme to the next
/// whitespace or quote. The last guard before a message is shown, for
/// text that came from somewhere that did not redact (a driver's error, a
/// config file's line quoted by its parser).
pub fn redact_urls_in(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        let scheme_start = rest[..found]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[found..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .map_or(rest.len(), |i| found + i);
        shown.push_str(&rest[..scheme_start]);
        shown.push_str(&redact_url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    shown.push_str(rest);
    shown
}

/// `text` with the value of every secret `key=value` query parameter masked.
fn mask_parameters(text: &str) -> String {
    let Some((head, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_secret(key) => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// Whether a query parameter's name says its value is a secret
/// (`password`, `sslpassword`, `auth_token`, `pwd`…), whatever its case
/// and however it is percent-encoded.
fn is_secret(key: &str) -> bool {
    let key = percent_decoded(key).to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "credential"]
        .iter()
        .any(|word| key.contains(word))
        || matches!(key.as_str(), "pass" | "pwd")
}

/// `%XX` escapes decoded (a malformed escape is kept as it is).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_in_the_user_info_are_masked() {
        let cases = [
            (
                "postgres://rheo:s3cret@db:5432/x",
                "postgres://rheo:***@db:5432/x",
            ),
            (
                "redis://:s3cret@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            // An unescaped @, / or ? inside the password.
            ("postgres://rheo:s3@c/r?et@db/x", "postgres://rheo:***@db/x"),
            (
                "mongodb://rheo:s3cret@h1:27017,h2:27017/db?replicaSet=rs",
                "mongodb://rheo:***@h1:27017,h2:27017/db?replicaSet=rs",
            ),
            ("postgres://rheo:@db/x", "postgres://rheo:***@db/x"),
            // Without a scheme separator.
            ("rheo:s3cret@db/x", "rheo:***@db/x"),
            ("postgres:rheo:s3cret@db/x", "postgres:***@db/x"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn password_parameters_are_masked() {
        let cases = [
            (
                "postgres://rheo@db/x?password=s3cret&sslmode=require",
                "postgres://rheo@db/x?password=***&sslmode=require",
            ),
            (
                "postgres://db/x?sslmode=verify-full&PASSWORD=s3cret",
                "postgres://db/x?sslmode=verify-full&PASSWORD=***",
            ),
            (
                "postgres://db/x?pass%77ord=s3cret",
                "postgres://db/x?pass%77ord=***",
            ),
            (
                "postgres://db/x?sslpassword=s3cret",
                "postgres://db/x?sslpassword=***",
            ),
            ("sqlite:rheo.db?pwd=s3cret", "sqlite:rheo.db?pwd=***"),
            (
                "postgres://u:a@db/x?password=b&schema=s",
                "postgres://u:***@db/x?password=***&schema=s",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn urls_inside_a_message_are_masked() {
        assert_eq!(
            super::redact_urls_in(
                "cannot open backend \"postgres://rheo:s3cret@db/x\": refused; \
                 see redis://:pw@r:6379?prefix=a and mongodb://u:p@m/?password=q"
            ),
            "cannot open backend \"postgres://rheo:***@db/x\": refused; \
             see redis://:***@r:6379?prefix=a and mongodb://u:***@m/?password=***"
        );
        assert_eq!(super::redact_urls_in("no url here"), "no url here");
        assert_eq!(
            super::redact_urls_in("1 | backend = 'postgres://a:b@c/d"),
            "1 | backend = 'postgres://a:***@c/d"
        );
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        for url in [
            "postgres://rheo@db/x",
            "sqlite://rheo.db",
            "sqlite::memory:",
            "memory://",
            "redis://127.0.0.1:6379?prefix=a",
            "mongodb://127.0.0.1:27018/?directConnection=true",
            "postgres://db/x?sslmode=require&sslrootcert=/etc/ca.pem",
            "not a url",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }
}

//! The web console at `/ui` (`docs/console.md`): static HTML, CSS and
//! JavaScript from `host/ui/`, embedded in the binary so an installed
//! `rheo` serves it with no files beside it and nothing fetched from
//! elsewhere (the page works offline).
//!
//! The routes are open — the page is the same for everyone — and stay out
//! of the OpenAPI document (they are merged after the document is built):
//! the page reads and changes everything through the `/v1` API, which asks
//! for the bearer token as usual (`docs/http.md#conventions`).

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// One embedded file: its path under `/ui/`, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// Embeds `host/ui/<path>` with a content type.
macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            bytes: include_bytes!(concat!("../../ui/", $path)),
        }
    };
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Every file of the console. A file added to `host/ui/` is served once it
/// is listed here.
const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("style.css", CSS),
    asset!("icon.svg", SVG),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("plot.js", JS),
    asset!("history.js", JS),
    asset!("sse.js", JS),
    asset!("delete.js", JS),
    asset!("forms.js", JS),
    asset!("samples.js", JS),
    asset!("pages/streams.js", JS),
    asset!("pages/events.js", JS),
    asset!("pages/groups.js", JS),
    asset!("pages/handlers.js", JS),
    asset!("pages/releases.js", JS),
    asset!("pages/nodes.js", JS),
];

/// Only this server's own files and API: no CDN, no inline script, no
/// framing by other sites.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; \
     base-uri 'none'";

/// The console's routes: `/` (what a browser pointed at the server asks
/// for) and `/ui` redirect to `/ui/` (so relative URLs in the page resolve
/// under it), `/ui/` is the page, `/ui/<file>` an asset. `/` redirects for
/// now only (307), so that it may serve something else one day.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route(
            "/ui/{*path}",
            get(|Path(path): Path<String>, headers: HeaderMap| async move {
                serve(&path, &headers)
            }),
        )
}

/// The asset at `path`, or 404; 304 when the client's copy is current.
fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.path == path) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no console file {path:?}\n"),
        )
            .into_response();
    };
    let etag = etag(asset.bytes);
    let common = [
        // Revalidate every time: the files change with the binary, and a
        // 304 costs one small round trip.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::ETAG,
            HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"0\"")),
        ),
    ];
    let current = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|given| given.split(',').any(|tag| tag.trim() == etag));
    if current {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        common,
        [(header::CONTENT_TYPE, asset.content_type)],
        asset.bytes,
    )
        .into_response()
}

/// A strong validator for `bytes`: FNV-1a, 64 bits, in quotes. (Not a
/// security property: it only tells a cached copy from the current one.)
fn etag(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("\"{hash:016x}\"")
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, to_bytes};
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    async fn call(path: &str, if_none_match: Option<&str>) -> Response {
        let mut request = Request::get(path);
        if let Some(tag) = if_none_match {
            request = request.header(header::IF_NONE_MATCH, tag);
        }
        router::<()>()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn header_of(response: &Response, name: header::HeaderName) -> &str {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn ui_redirects_to_the_page_which_loads_its_module() {
        let bare = call("/ui", None).await;
        assert_eq!(bare.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(header_of(&bare, header::LOCATION), "/ui/");
        let root = call("/", None).await;
        assert_eq!(root.status(), StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(header_of(&root, header::LOCATION), "/ui/");

        let page = call("/ui/", None).await;
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(header_of(&page, header::CONTENT_TYPE), HTML);
        assert_eq!(header_of(&page, header::CACHE_CONTROL), "no-cache");
        assert!(header_of(&page, header::CONTENT_SECURITY_POLICY).contains("connect-src 'self'"));
        let body = to_bytes(page.into_body(), 1 << 20).await.unwrap();
        let html = String::from_utf8(body.to_vec()).unwrap();
        assert!(html.contains(r#"src="app.js""#), "{html}");
    }

    #[tokio::test]
    async fn assets_have_their_content_types_and_revalidate_by_etag() {
        for (path, content_type) in [
            ("/ui/app.js", JS),
            ("/ui/pages/groups.js", JS),
            ("/ui/style.css", CSS),
            ("/ui/icon.svg", SVG),
            ("/ui/index.html", HTML),
        ] {
            let response = call(path, None).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(header_of(&response, header::CONTENT_TYPE), content_type);
            let tag = header_of(&response, header::ETAG).to_owned();
            assert!(tag.starts_with('"') && tag.len() == 18, "{tag}");
            let again = call(path, Some(&tag)).await;
            assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
            let other = call(path, Some("\"0000000000000000\"")).await;
            assert_eq!(other.status(), StatusCode::OK, "{path}");
        }
    }

    #[tokio::test]
    async fn unknown_files_are_404() {
        for path in [
            "/ui/nope.js",
            "/ui/pages/",
            "/ui/../Cargo.toml",
            "/ui/pages/x.js",
        ] {
            let response = call(path, None).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[test]
    fn every_file_of_host_ui_is_listed() {
        fn walk(dir: &std::path::Path, base: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, base, found);
                } else {
                    let relative = path.strip_prefix(base).unwrap();
                    found.push(relative.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut found = Vec::new();
        walk(&base, &base, &mut found);
        for file in found {
            assert!(
                ASSETS.iter().any(|a| a.path == file),
                "host/ui/{file} is not served: add it to ASSETS"
            );
        }
    }

    #[test]
    fn every_listed_asset_is_non_empty_and_listed_once() {
        for (i, asset) in ASSETS.iter().enumerate() {
            assert!(!asset.bytes.is_empty(), "{}", asset.path);
            assert!(
                ASSETS[..i].iter().all(|a| a.path != asset.path),
                "{} listed twice",
                asset.path
            );
        }
    }
}

//! Protocol-level failures, each a JSON error: unknown routes, wrong
//! methods, malformed JSON, wrong content types, oversized bodies, and
//! bearer-token auth.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use super::{TestApp, code};
use crate::api::{ApiSettings, NamedToken};

fn raw(method: Method, uri: &str, content_type: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(ct) = content_type {
        builder = builder.header(header::CONTENT_TYPE, ct);
    }
    builder
        .body(Body::from(body.to_owned()))
        .expect("a valid request")
}

fn with_token(uri: &str, token: Option<&str>) -> Request<Body> {
    let mut builder = Request::builder().uri(uri);
    if let Some(t) = token {
        builder = builder.header(header::AUTHORIZATION, t);
    }
    builder.body(Body::empty()).expect("a valid request")
}

fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn unknown_routes_are_404_json() {
    let app = TestApp::new();
    for uri in ["/nope", "/v1", "/v1/streams/s/unknown", "/v2/streams"] {
        let a = app.get(uri).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn wrong_methods_are_405_json() {
    let app = TestApp::new();
    let cases = [
        (Method::DELETE, "/v1/streams"),
        (Method::PUT, "/v1/streams/s"),
        (Method::GET, "/v1/streams/s/groups/g/ack"),
        (Method::POST, "/healthz"),
    ];
    for (method, uri) in cases {
        let a = app.send(method.clone(), uri, None).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            "{method} {uri}"
        );
    }
}

#[tokio::test]
async fn malformed_json_and_wrong_types_are_400_naming_the_problem() {
    let app = TestApp::new();
    let json = Some("application/json");
    let a = app
        .call(raw(Method::POST, "/v1/streams", json, "{\"name\":"))
        .await;
    assert_eq!((a.status, code(&a)), (StatusCode::BAD_REQUEST, "invalid"));
    assert!(message(&a.body).contains("parse"), "{}", a.body);

    let a = app
        .call(raw(Method::POST, "/v1/streams", json, "{\"name\": 5}"))
        .await;
    assert_eq!((a.status, code(&a)), (StatusCode::BAD_REQUEST, "invalid"));
    assert!(message(&a.body).contains("name"), "{}", a.body);

    let a = app.call(raw(Method::POST, "/v1/streams", json, "")).await;
    assert_eq!(code(&a), "invalid", "an empty body is not a stream");
}

#[tokio::test]
async fn bodies_must_be_declared_json() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    app.group("s", "g").await;
    let cases = [
        ("/v1/streams", None),
        ("/v1/streams", Some("text/plain")),
        (
            "/v1/streams/s/groups/g/fetch",
            Some("application/x-www-form-urlencoded"),
        ),
        ("/v1/streams/s/groups/g/fetch", None),
    ];
    for (uri, content_type) in cases {
        let a = app
            .call(raw(Method::POST, uri, content_type, "{\"name\": \"x\"}"))
            .await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            "{uri} {content_type:?}"
        );
    }
    let vendor = app
        .call(raw(
            Method::POST,
            "/v1/streams",
            Some("application/vnd.rheo+json; charset=utf-8"),
            "{\"name\": \"x\"}",
        ))
        .await;
    assert_eq!(vendor.status, StatusCode::CREATED);
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_json() {
    let app = TestApp::with_settings(ApiSettings {
        body_limit: 2048,
        ..ApiSettings::default()
    });
    app.stream("s", 1).await;
    let big = json!({"payload": {"blob": "x".repeat(4096)}});
    let a = app.post("/v1/streams/s/events", big).await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let fetch = app
        .call(raw(
            Method::POST,
            "/v1/streams/s/groups/g/fetch",
            Some("application/json"),
            &" ".repeat(4096),
        ))
        .await;
    assert_eq!(
        fetch.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "also for optional bodies"
    );
    let small = app
        .post("/v1/streams/s/events", json!({"payload": {"a": 1}}))
        .await;
    assert_eq!(small.status, StatusCode::CREATED);
}

#[tokio::test]
async fn with_a_token_every_v1_route_needs_it_and_probes_stay_open() {
    let app = TestApp::with_settings(ApiSettings {
        auth_token: Some("s3cret".into()),
        ..ApiSettings::default()
    });
    let missing = app.call(with_token("/v1/streams", None)).await;
    assert_eq!(
        (missing.status, code(&missing)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    assert_eq!(missing.headers[header::WWW_AUTHENTICATE], "Bearer");
    for wrong in ["Bearer nope", "Bearer s3cret2", "Basic s3cret", "s3cret"] {
        let a = app.call(with_token("/v1/streams", Some(wrong))).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{wrong}");
    }
    let ok = app
        .call(with_token("/v1/streams", Some("Bearer s3cret")))
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    let unknown = app.call(with_token("/v1/whatever", None)).await;
    assert_eq!(
        unknown.status,
        StatusCode::UNAUTHORIZED,
        "no route probing without a token"
    );
    for open in ["/healthz", "/readyz", "/metrics"] {
        let a = app.call(with_token(open, None)).await;
        assert_eq!(a.status, StatusCode::OK, "{open}");
    }
    for protected in ["/v1/openapi.json", "/v1/test/clock"] {
        let a = app.call(with_token(protected, None)).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{protected}");
    }
}

/// `GET /v1/whoami` says what the caller's token may do: everything
/// without auth, only reading with a read token, and the token's name.
#[tokio::test]
async fn whoami_tells_the_caller_what_its_token_may_do() {
    let open = TestApp::new();
    let answer = open.call(with_token("/v1/whoami", None)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.body,
        json!({"auth_required": false, "may_write": true, "token_name": null})
    );

    let app = TestApp::with_settings(ApiSettings {
        auth_token: Some("s3cret".into()),
        read_token: Some("look".into()),
        tokens: vec![NamedToken::parse("ana:read=peek").expect("a named token")],
        ..ApiSettings::default()
    });
    let missing = app.call(with_token("/v1/whoami", None)).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    for (token, may_write, name) in [
        ("s3cret", true, json!(null)),
        ("look", false, json!(null)),
        ("peek", false, json!("ana")),
    ] {
        let answer = app
            .call(with_token("/v1/whoami", Some(&format!("Bearer {token}"))))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{token}");
        assert_eq!(
            answer.body,
            json!({"auth_required": true, "may_write": may_write, "token_name": name}),
            "{token}"
        );
    }
}

#[tokio::test]
async fn the_read_token_reads_and_changes_nothing() {
    let app = TestApp::with_settings(ApiSettings {
        auth_token: Some("s3cret".into()),
        read_token: Some("look".into()),
        ..ApiSettings::default()
    });
    let request = |method: &str, uri: &str, token: &str, body: Value| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .expect("a valid request")
    };
    let create = json!({"name": "s", "partition_count": 1});
    let refused = app
        .call(request("POST", "/v1/streams", "look", create.clone()))
        .await;
    assert_eq!(
        (refused.status, code(&refused)),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    assert!(
        !refused.headers.contains_key(header::WWW_AUTHENTICATE),
        "the token was right, only its scope is not"
    );
    let listed = app
        .call(with_token("/v1/streams", Some("Bearer look")))
        .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(
        listed.body,
        json!({"streams": []}),
        "the refused create wrote nothing"
    );

    let created = app
        .call(request("POST", "/v1/streams", "s3cret", create))
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let event = json!({"payload": {"a": 1}});
    let append = app
        .call(request(
            "POST",
            "/v1/streams/s/events",
            "look",
            event.clone(),
        ))
        .await;
    assert_eq!(append.status, StatusCode::FORBIDDEN);
    let read = app
        .call(with_token("/v1/streams/s/events", Some("Bearer look")))
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body["events"], json!([]), "nothing was appended");
    for (method, uri) in [
        ("DELETE", "/v1/handlers/h"),
        ("PUT", "/v1/handlers/h"),
        ("POST", "/v1/test/clock"),
    ] {
        let a = app.call(request(method, uri, "look", json!({}))).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{method} {uri}");
    }
    let wrong = app
        .call(with_token("/v1/streams", Some("Bearer looks")))
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let doc = app
        .call(with_token("/v1/openapi.json", Some("Bearer look")))
        .await;
    assert_eq!(doc.status, StatusCode::OK);
}

#[tokio::test]
async fn without_a_token_nothing_asks_for_one() {
    let app = TestApp::new();
    let a = app
        .call(with_token("/v1/streams", Some("Bearer anything")))
        .await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn the_console_is_open_with_a_token_and_no_route_of_the_document() {
    let app = TestApp::with_settings(ApiSettings {
        auth_token: Some("s3cret".into()),
        ..ApiSettings::default()
    });
    // The page and its files are static: no token (docs/console.md#the-token).
    for open in ["/ui/", "/ui/app.js", "/ui/style.css"] {
        let a = app.call(with_token(open, None)).await;
        assert_eq!(a.status, StatusCode::OK, "{open}");
    }
    let missing = app.call(with_token("/ui/nope.js", None)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let doc = app
        .call(with_token("/v1/openapi.json", Some("Bearer s3cret")))
        .await;
    assert_eq!(doc.status, StatusCode::OK);
    let paths = doc.body["paths"].as_object().expect("paths");
    assert!(
        paths.keys().all(|p| !p.starts_with("/ui")),
        "the console is no API route: {:?}",
        paths.keys().collect::<Vec<_>>()
    );
}

//! Probes, metrics and the OpenAPI document.

use axum::http::{StatusCode, header};
use serde_json::json;

use super::TestApp;

#[tokio::test]
async fn healthz_and_readyz_answer_200_on_a_working_backend() {
    let app = TestApp::new();
    let live = app.get("/healthz").await;
    assert_eq!(
        (live.status, live.body),
        (StatusCode::OK, json!({"status": "ok"}))
    );
    let ready = app.get("/readyz").await;
    assert_eq!(
        (ready.status, ready.body),
        (
            StatusCode::OK,
            json!({"status": "ready", "backend": "memory"})
        )
    );
}

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_status() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    app.get("/v1/streams/s").await;
    app.get("/v1/streams/missing").await;
    app.get("/v1/no/such/route").await;
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(
        metrics.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = metrics.body.as_str().expect("plain text");
    for line in [
        "rheo_http_requests_total{method=\"POST\",route=\"/v1/streams\",status=\"201\"} 1",
        "rheo_http_requests_total{method=\"GET\",route=\"/v1/streams/{stream}\",status=\"200\"} 1",
        "rheo_http_requests_total{method=\"GET\",route=\"/v1/streams/{stream}\",status=\"404\"} 1",
        "rheo_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1",
        "rheo_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/streams/{stream}\"} 2",
        "rheo_http_backend_errors_total{route=\"/v1/streams/{stream}\",code=\"stream_not_found\"} 1",
        "# TYPE rheo_http_request_duration_seconds histogram",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn the_openapi_document_lists_every_route_with_its_methods() {
    let app = TestApp::new();
    let a = app.get("/v1/openapi.json").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers[header::CONTENT_TYPE], "application/json");
    let doc = a.body;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let expected = [
        ("/v1/streams", &["get", "post"][..]),
        ("/v1/streams/{stream}", &["delete", "get", "patch"]),
        ("/v1/streams/{stream}/events", &["get", "post"]),
        ("/v1/streams/{stream}/events/batch", &["post"]),
        ("/v1/streams/{stream}/query", &["post"]),
        ("/v1/streams/{stream}/groups", &["get", "post"]),
        ("/v1/streams/{stream}/groups/{group}", &["delete", "get"]),
        ("/v1/streams/{stream}/groups/{group}/lag", &["get"]),
        ("/v1/streams/{stream}/groups/{group}/leases", &["get"]),
        ("/v1/streams/{stream}/groups/{group}/fetch", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/ack", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/nack", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/reject", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/renew", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/settle", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/replay", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/reset", &["post"]),
        ("/v1/streams/{stream}/groups/{group}/dead-letters", &["get"]),
        (
            "/v1/streams/{stream}/groups/{group}/dead-letters/redrive",
            &["post"],
        ),
        ("/v1/streams/{stream}/groups/{group}/quarantine", &["get"]),
        (
            "/v1/streams/{stream}/groups/{group}/quarantine/release",
            &["post"],
        ),
        ("/v1/test/clock", &["get", "post"]),
        ("/v1/handlers", &["get"]),
        ("/v1/handlers/{handler}", &["delete", "get", "put"]),
        ("/v1/handlers/{handler}/module", &["put"]),
        ("/v1/handlers/{handler}/try", &["post"]),
        ("/v1/handlers/{handler}/rollback", &["post"]),
        ("/v1/handlers/{handler}/promote", &["post"]),
        ("/v1/handlers/{handler}/history", &["get"]),
        ("/v1/handlers/{handler}/pause", &["post"]),
        ("/v1/handlers/{handler}/resume", &["post"]),
        ("/v1/handlers/{handler}/logs", &["get"]),
        ("/v1/nodes", &["get"]),
        ("/v1/whoami", &["get"]),
        ("/v1/groups", &["get"]),
        ("/v1/metrics/samples", &["get"]),
        ("/healthz", &["get"]),
        ("/readyz", &["get"]),
        ("/metrics", &["get"]),
    ];
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), expected.len(), "{:?}", paths.keys());
    for (path, methods) in expected {
        let item = paths[path].as_object().unwrap();
        let mut found: Vec<&str> = item.keys().map(String::as_str).collect();
        found.sort_unstable();
        assert_eq!(found, methods, "{path}");
    }
    let ack = &doc["paths"]["/v1/streams/{stream}/groups/{group}/ack"]["post"];
    for status in ["200", "401", "409", "413", "415", "503"] {
        assert!(ack["responses"][status].is_object(), "ack lacks {status}");
    }
    assert!(doc["components"]["schemas"]["LeaseBody"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

/// What client generators need from the document, checked here without
/// one; `tests/tests/http_clients.rs` runs openapi-python-client on it
/// (docs/http.md#generated-clients).
#[tokio::test]
async fn the_openapi_document_is_fit_for_client_generators() {
    let doc = TestApp::new().get("/v1/openapi.json").await.body;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let route = format!("{method} {path}");
            assert!(operation["operationId"].is_string(), "{route}");
            // Every body has a schema, in a content type generators send.
            if let Some(content) = operation["requestBody"]["content"].as_object() {
                for (content_type, media) in content {
                    assert!(
                        [
                            "application/json",
                            "multipart/form-data",
                            "application/octet-stream"
                        ]
                        .contains(&content_type.as_str()),
                        "{route}: {content_type}"
                    );
                    assert!(media["schema"].is_object(), "{route}: no schema");
                }
            }
            // An open route says "no auth" (`[]`), not "auth optional".
            if let Some(security) = operation.get("security") {
                assert_eq!(security, &json!([]), "{route}");
            }
        }
    }
    assert_eq!(
        doc["paths"]["/healthz"]["get"]["security"],
        json!([]),
        "the health routes are open"
    );

    let schemas = &doc["components"]["schemas"];
    // `start_after` takes an integer as well as a per-partition map.
    let start_after = &schemas["StartAfter"]["oneOf"];
    assert_eq!(start_after[0]["type"], "integer", "{start_after}");
    assert_eq!(
        start_after[1]["$ref"], "#/components/schemas/PartitionSequences",
        "{start_after}"
    );
    assert_eq!(
        schemas["CreateGroupBody"]["properties"]["start_after"]["oneOf"][1]["$ref"],
        "#/components/schemas/StartAfter"
    );
    // Payloads are the named `JsonObject`.
    assert_eq!(
        schemas["EventBody"]["properties"]["payload"]["$ref"],
        "#/components/schemas/JsonObject"
    );
    // Map keys are strings, as JSON has them.
    let mut stack = vec![schemas];
    while let Some(value) = stack.pop() {
        if let Some(names) = value.get("propertyNames") {
            assert_eq!(names["type"], "string", "{value}");
        }
        match value {
            serde_json::Value::Object(map) => stack.extend(map.values()),
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
}

//! The OpenAPI document states what the server enforces
//! (docs/http.md#contract): the limits come from the validators' own
//! constants, every route lists the failures it can answer with, and the
//! server refuses a request exactly where the document says it would.
//! `tests/tests/contract.rs` checks the same with Schemathesis against a
//! real server; this guards the key constraints without one.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::TestApp;
use crate::api::dto::schema::{self, Target};
use crate::api::openapi;
use crate::model::{
    ID_PATTERN, MAX_DELAY_MS, MAX_FETCH_LIMIT, MAX_ID_LEN, MAX_LEASE_MS, MAX_MAX_ATTEMPTS,
    MAX_NAME_LEN, MAX_PARTITIONS, MAX_QUERY_LIMIT, MAX_SEQUENCE, MAX_SETTLE_BATCH, NAME_PATTERN,
};

async fn document() -> Value {
    TestApp::new().get("/v1/openapi.json").await.body
}

/// Every operation: (`METHOD path`, the operation).
fn operations(doc: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            out.push((format!("{} {path}", method.to_uppercase()), operation));
        }
    }
    out
}

fn property<'a>(doc: &'a Value, schema: &str, name: &str) -> &'a Value {
    &doc["components"]["schemas"][schema]["properties"][name]
}

#[tokio::test]
async fn every_rule_describes_a_field_or_parameter_of_the_document() {
    // Laid over the served document again, each rule finds its place and
    // changes nothing.
    let doc = document().await;
    let mut again = doc.clone();
    assert_eq!(
        openapi::apply_rules(&mut again),
        Vec::<Target>::new(),
        "a rule names a field or parameter the document lacks"
    );
    assert_eq!(again, doc, "the served document has every rule already");
    assert!(schema::rules().len() > 40);
}

#[tokio::test]
async fn names_ids_and_limits_come_from_the_validators() {
    let doc = document().await;
    // Every {stream}, {group} and {handler} has the rule of names.
    let mut names = 0;
    for (route, operation) in operations(&doc) {
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            if parameter["in"] == "path" {
                let schema = &parameter["schema"];
                assert_eq!(schema["pattern"], NAME_PATTERN, "{route}");
                assert_eq!(schema["maxLength"], MAX_NAME_LEN, "{route}");
                assert_eq!(schema["minLength"], 1, "{route}");
                names += 1;
            }
        }
    }
    assert!(names >= 30, "{names} path parameters");
    assert_eq!(
        property(&doc, "CreateStreamBody", "name")["pattern"],
        NAME_PATTERN
    );
    assert_eq!(
        property(&doc, "CreateStreamBody", "name")["example"],
        "orders",
        "examples and descriptions stay"
    );
    let id = property(&doc, "AckBody", "lease_id");
    assert_eq!(
        (&id["pattern"], &id["maxLength"]),
        (&json!(ID_PATTERN), &json!(MAX_ID_LEN))
    );
    let bound = |schema: &str, field: &str| {
        let p = property(&doc, schema, field);
        (p["minimum"].clone(), p["maximum"].clone())
    };
    assert_eq!(
        bound("CreateStreamBody", "partition_count"),
        (json!(1), json!(MAX_PARTITIONS))
    );
    assert_eq!(
        bound("FetchBody", "limit"),
        (json!(1), json!(MAX_FETCH_LIMIT))
    );
    assert_eq!(
        bound("FetchBody", "lease_ms"),
        (json!(1), json!(MAX_LEASE_MS))
    );
    assert_eq!(
        bound("NackBody", "delay_ms"),
        (json!(0), json!(MAX_DELAY_MS))
    );
    assert_eq!(
        bound("CreateGroupBody", "max_attempts"),
        (json!(1), json!(MAX_MAX_ATTEMPTS))
    );
    assert_eq!(
        bound("QueryBody", "after_sequence"),
        (json!(0), json!(MAX_SEQUENCE))
    );
    assert_eq!(
        property(&doc, "AppendBatchBody", "events")["maxItems"],
        crate::api::streams::MAX_APPEND_BATCH
    );
    assert_eq!(
        property(&doc, "SettleBody", "settlements")["maxItems"],
        MAX_SETTLE_BATCH
    );
    let read = &doc["paths"]["/v1/streams/{stream}/events"]["get"]["parameters"];
    let limit = read
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap();
    assert_eq!(limit["schema"]["maximum"], MAX_QUERY_LIMIT);
    assert!(limit["description"].is_string(), "{limit}");
}

#[tokio::test]
async fn every_route_lists_the_failures_it_can_answer_with() {
    let doc = document().await;
    for (route, operation) in operations(&doc) {
        let responses = &operation["responses"];
        let has = |status: &str| responses[status].is_object();
        if !route.contains(" /v1/") {
            assert!(!has("401"), "{route}: open routes need no token");
            continue;
        }
        for status in ["401", "503"] {
            assert!(has(status), "{route} lacks {status}");
        }
        assert_eq!(
            has("403"),
            !route.starts_with("GET "),
            "{route}: 403 is the read token on a route that changes something"
        );
        if operation["parameters"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
        {
            assert!(has("400"), "{route}: a bad parameter is a 400");
        }
        if operation["requestBody"].is_object() {
            for status in ["400", "413", "415"] {
                assert!(has(status), "{route} lacks {status}");
            }
        }
    }
    assert!(doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer");
}

#[tokio::test]
async fn bodies_say_whether_they_are_required_and_refuse_unknown_fields() {
    let doc = document().await;
    for (route, operation) in operations(&doc) {
        let Some(body) = operation["requestBody"].as_object() else {
            continue;
        };
        let optional = ["lease_fetch", "event_query", "clock_move"]
            .contains(&operation["operationId"].as_str().unwrap());
        assert_eq!(body["required"], json!(!optional), "{route}");
    }
    for name in [
        "CreateStreamBody",
        "EventInputBody",
        "FetchBody",
        "AckBody",
        "SettlementBody",
        "ReplayBody",
        "ResetBody",
        "RedriveBody",
        "QueryBody",
    ] {
        assert_eq!(
            doc["components"]["schemas"][name]["additionalProperties"],
            json!(false),
            "{name}"
        );
    }
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["ReplayBody"]["oneOf"].as_array().unwrap().len(), 4);
    // On the property itself: beside `boolean` in an `allOf`, generators
    // refuse to merge it (openapi-python-client dropped the schema).
    assert_eq!(
        schemas["ResetBody"]["properties"]["confirm"],
        json!({"type": "boolean", "const": true, "description": "Must be exactly `true`."})
    );
    assert_eq!(schemas["ResetBody"]["allOf"].as_array().unwrap().len(), 1);
    assert_eq!(schemas["RedriveBody"]["oneOf"].as_array().unwrap().len(), 2);
    assert_eq!(
        schemas["SettlementBody"]["oneOf"].as_array().unwrap().len(),
        3
    );
}

/// The server refuses exactly past the boundary the document states.
#[tokio::test]
async fn the_server_refuses_where_the_document_says() {
    let app = TestApp::new();
    let create = |name: String| json!({"name": name});
    let longest = "s".repeat(MAX_NAME_LEN);
    assert_eq!(
        app.post("/v1/streams", create(longest)).await.status,
        StatusCode::CREATED
    );
    for bad in ["s".repeat(MAX_NAME_LEN + 1), "..".into(), "a b".into()] {
        let a = app.post("/v1/streams", create(bad.clone())).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}: {}", a.body);
    }
    app.stream_with_group(0).await;
    let fetch = |limit: u32| json!({"limit": limit});
    let at = app
        .post("/v1/streams/s/groups/g/fetch", fetch(MAX_FETCH_LIMIT))
        .await;
    assert_eq!(at.status, StatusCode::OK, "{}", at.body);
    let past = app
        .post("/v1/streams/s/groups/g/fetch", fetch(MAX_FETCH_LIMIT + 1))
        .await;
    assert_eq!(past.status, StatusCode::BAD_REQUEST);
    // Ids are measured in characters, as JSON Schema's maxLength counts.
    let wide = "é".repeat(MAX_ID_LEN);
    let a = app.post("/v1/streams/s/events", json!({"id": wide})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    // The lag partition list is read as its pattern says.
    for (query, status) in [
        ("", StatusCode::OK),
        ("?partitions=", StatusCode::OK),
        ("?partitions=0", StatusCode::OK),
        ("?partitions=%200%20", StatusCode::OK),
        ("?partitions=0,,0", StatusCode::BAD_REQUEST),
        ("?partitions=%2B0", StatusCode::BAD_REQUEST),
        ("?partitions=1234567890", StatusCode::BAD_REQUEST),
    ] {
        let a = app.get(&format!("/v1/streams/s/groups/g/lag{query}")).await;
        assert_eq!(a.status, status, "{query}: {}", a.body);
    }
}

//! The built SQL of history queries, per dialect.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::{Builder, events_query};
use crate::postgres::PostgresDialect;
use crate::sql::{Arg, Dialect};
use crate::sqlite::SqliteDialect;
use rheo_core::model::{Query, StreamName, parse_where};

fn build<D: Dialect>(filter: Value) -> Builder {
    let query = Query {
        filters: parse_where(&filter).unwrap(),
        ..Query::default()
    };
    events_query::<D>(&StreamName::parse("s").unwrap(), &query, true)
}

fn bound(b: &Builder, text: &str) -> bool {
    b.binds.contains(&Arg::Text(Cow::Owned(text.to_owned())))
}

#[test]
fn values_are_always_bound_never_inlined() {
    let evil = "x'; DROP TABLE rheo_events; --";
    let filter = json!({ "type": evil, "payload.a": evil, "key": {"$gt": evil} });
    for b in [
        build::<SqliteDialect>(filter.clone()),
        build::<PostgresDialect>(filter),
    ] {
        assert!(!b.sql.contains("DROP"), "{}", b.sql);
        assert!(bound(&b, evil));
    }
}

#[test]
fn placeholders_are_numbered_in_bind_order() {
    let filter = json!({"type": "t", "key": "k"});
    let b = build::<PostgresDialect>(filter.clone());
    assert_eq!(b.binds.len(), 4, "stream, type, key, limit");
    assert!(b.sql.contains("$1") && b.sql.contains("$4") && !b.sql.contains("$5"));
    let b = build::<SqliteDialect>(filter);
    assert!(b.sql.contains("?1") && b.sql.contains("?4") && !b.sql.contains('$'));
}

#[test]
fn lineage_keys_use_the_indexed_expression_on_sqlite() {
    let b = build::<SqliteDialect>(json!({"correlation_id": "c"}));
    assert!(
        b.sql.contains("json_extract(metadata, '$.correlation_id')"),
        "{}",
        b.sql
    );
    let b = build::<SqliteDialect>(json!({"payload.a.b": 1}));
    assert!(bound(&b, "$.\"a\".\"b\""));
}

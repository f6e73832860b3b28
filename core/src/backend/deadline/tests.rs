//! The deadline of a store call and the code a call that ran out of time
//! gets (`docs/cluster.md#a-node-cut-off-from-the-store`).

use std::sync::Arc;
use std::time::Duration;

use super::{Kind, bound, bounded, sending_read, sending_write};
use crate::backend::memory::MemoryBackend;
use crate::backend::{CreateStream, Error};
use crate::clock::FrozenClock;
use crate::model::StreamName;

const TIMEOUT: Duration = Duration::from_millis(300);

/// A store that never answers, after marking what it sent as `marks` says.
async fn silent(marks: &[fn()]) -> crate::backend::Result<()> {
    for mark in marks {
        mark();
    }
    std::future::pending().await
}

async fn run(kind: Kind, marks: &[fn()]) -> (Error, Duration) {
    let started = tokio::time::Instant::now();
    let error = bound(TIMEOUT, "op", kind, silent(marks))
        .await
        .expect_err("a silent store cannot answer");
    (error, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_read_that_gets_no_answer_is_unavailable_at_the_deadline() {
    let (error, took) = run(Kind::Read, &[sending_read]).await;
    assert_eq!(error.code(), "backend_unavailable", "{error}");
    assert_eq!(took, TIMEOUT);
    assert!(error.to_string().contains("300 ms"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_write_stuck_before_its_commit_is_unavailable() {
    let (error, took) = run(Kind::Write, &[sending_read]).await;
    assert_eq!(error.code(), "backend_unavailable", "{error}");
    assert!(error.to_string().contains("nothing was written"), "{error}");
    assert_eq!(took, TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn a_write_stuck_after_its_commit_was_sent_is_ambiguous() {
    let (error, _) = run(Kind::Write, &[sending_read, sending_write]).await;
    assert_eq!(error.code(), "ambiguous", "{error}");
    // A later read of the same call does not make it unambiguous.
    let (error, _) = run(Kind::Write, &[sending_write, sending_read]).await;
    assert_eq!(error.code(), "ambiguous", "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_write_of_a_store_that_does_not_say_what_it_sent_is_ambiguous() {
    let (error, _) = run(Kind::Write, &[]).await;
    assert_eq!(error.code(), "ambiguous", "{error}");
    // …and a read of such a store is unavailable.
    let (error, _) = run(Kind::Read, &[]).await;
    assert_eq!(error.code(), "backend_unavailable", "{error}");
}

#[tokio::test(start_paused = true)]
async fn each_call_starts_with_nothing_sent() {
    let (error, _) = run(Kind::Write, &[sending_read, sending_write]).await;
    assert_eq!(error.code(), "ambiguous");
    let (error, _) = run(Kind::Write, &[sending_read]).await;
    assert_eq!(error.code(), "backend_unavailable", "{error}");
}

#[tokio::test(start_paused = true)]
async fn an_answer_in_time_passes_through_with_its_own_error() {
    let ok = bound(TIMEOUT, "op", Kind::Write, async {
        tokio::time::sleep(TIMEOUT / 2).await;
        Ok(7)
    })
    .await;
    assert_eq!(ok, Ok(7));
    let refused: crate::backend::Result<()> =
        bound(TIMEOUT, "op", Kind::Write, async { Err(Error::StaleLease) }).await;
    assert_eq!(refused, Err(Error::StaleLease));
}

#[test]
fn marks_outside_a_bounded_call_do_nothing() {
    sending_read();
    sending_write();
}

#[tokio::test]
async fn a_bounded_store_answers_as_the_store_it_wraps() {
    let store = bounded(
        Arc::new(MemoryBackend::new(FrozenClock::at_system_time())),
        TIMEOUT,
    );
    let name = StreamName::parse("s").unwrap();
    let created = store
        .create_stream(CreateStream {
            name: name.clone(),
            partition_count: 2,
            retention: None,
        })
        .await
        .expect("create");
    assert_eq!(created.partition_count, 2);
    assert_eq!(store.get_stream(&name).await.unwrap().partition_count, 2);
    assert_eq!(store.kind(), "memory");
    let again = store
        .create_stream(CreateStream {
            name,
            partition_count: 2,
            retention: None,
        })
        .await;
    assert_eq!(again.map(|_| ()).unwrap_err().code(), "already_exists");
}

//! `POST …/groups/{group}/fetch`: claim leases, optionally long-polling.
//!
//! A long poll must wake for two different kinds of event: something new
//! appended (or nacked, replayed, redriven, reset) — the backend's
//! [`subscribe`](crate::backend::Backend::subscribe) wake-up — and time
//! passing on the backend's clock until a lease expires or a retry delay
//! ends — [`next_due`](crate::backend::Backend::next_due) and the clock's
//! `sleep_until`. The clock may be a frozen test clock, which only moves
//! when told to, so the caller's `wait_ms` is measured separately on the
//! real (tokio) clock. Shutdown ends every wait at once.
//!
//! The wake-up is marked seen *before* each fetch: an append landing
//! between an empty fetch and the wait still wakes it.

use std::time::Duration;

use axum::extract::State;
use axum::{Extension, Json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::{self, FetchBody, LeaseBody, LeaseListBody};
use crate::api::error::{ApiError, ErrorBody};
use crate::api::extract::{GroupPath, JsonOrEmpty};
use crate::api::state::AppState;
use crate::api::timeout::Budget;
use crate::backend::{self, FetchRequest, Partitions};
use crate::model::{ConsumerId, DEFAULT_FETCH_LIMIT, Lease};

/// Longest long poll a client may ask for.
pub(crate) const MAX_WAIT_MS: u64 = 30_000;

/// When `next_due` says something is claimable now but the fetch found
/// nothing (another consumer took it first, or a poison delivery was
/// dead-lettered instead), wait this long before asking again rather than
/// spinning.
const RECHECK_DELAY: Duration = Duration::from_millis(20);

/// The fetch route.
pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(lease_fetch))
}

/// Claim up to `limit` leases, fairly across partitions. With `wait_ms`,
/// waits for claimable work when there is none yet.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/fetch", tag = "leases",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body(content = FetchBody, description = "Optional; an empty body means the defaults"),
    responses(
        (status = 200, description = "Leases (possibly none), sorted by (partition, sequence)", body = LeaseListBody),
        (status = 400, description = "Bad limit, lease_ms, wait_ms or partition", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn lease_fetch(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    budget: Option<Extension<Budget>>,
    JsonOrEmpty(body): JsonOrEmpty<FetchBody>,
) -> Result<Json<LeaseListBody>, ApiError> {
    let wait_ms = body.wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(
            "wait_ms",
            format!("must be at most {MAX_WAIT_MS} (got {wait_ms})"),
        ));
    }
    // The wait comes on top of the request timeout (docs/http.md#request-timeout).
    if let Some(Extension(budget)) = budget {
        budget.grant(Duration::from_millis(wait_ms));
    }
    let request = FetchRequest {
        stream,
        group,
        limit: body.limit.unwrap_or(DEFAULT_FETCH_LIMIT),
        consumer_id: body.consumer_id.unwrap_or_else(ConsumerId::generate),
        lease_ms: body.lease_ms.unwrap_or(state.settings.default_lease_ms),
        partitions: dto::partitions(body.partitions),
    };
    let leases = fetch_waiting(&state, request, Duration::from_millis(wait_ms)).await?;
    Ok(Json(LeaseListBody {
        leases: leases.into_iter().map(LeaseBody::from).collect(),
    }))
}

/// Fetches; while the result is empty, waits (at most `wait` of real time)
/// for a wake-up or the next due time and fetches again.
async fn fetch_waiting(
    state: &AppState,
    request: FetchRequest,
    wait: Duration,
) -> backend::Result<Vec<Lease>> {
    let backend = &state.backend;
    let deadline = tokio::time::Instant::now() + wait;
    let selects_nothing = matches!(&request.partitions, Partitions::Only(p) if p.is_empty());
    let mut wakeup = backend.subscribe(&request.stream);
    let mut draining = state.draining();
    loop {
        wakeup.mark_seen();
        let leases = backend.fetch(request.clone()).await?;
        if !leases.is_empty() || wait.is_zero() || selects_nothing || *draining.borrow() {
            return Ok(leases);
        }
        let due = backend
            .next_due(&request.stream, &request.group, &request.partitions)
            .await?;
        let clock = backend.clock();
        let due_wait = async {
            match due {
                Some(at) if at <= clock.now() => tokio::time::sleep(RECHECK_DELAY).await,
                Some(at) => clock.sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = wakeup.changed() => {}
            () = due_wait => {}
            () = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            _ = draining.wait_for(|draining| *draining) => return Ok(Vec::new()),
        }
    }
}

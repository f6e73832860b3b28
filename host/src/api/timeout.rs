//! Every request answers within the request timeout
//! (`--request-timeout-ms`, `docs/http.md#request-timeout`).
//!
//! Each store call has its own deadline (the store timeout,
//! `crate::backend::bounded`); this bounds a request as a whole, however
//! many calls it makes. A request still running when its time is up is
//! dropped and answers 503 with `Retry-After: 1`: `backend_unavailable`
//! for a `GET` or `HEAD`, which changes nothing, and `ambiguous` for any
//! other method, whose write may have gone through. Two kinds of request
//! get more time, as documented:
//!
//! * a long poll (a fetch with `wait_ms`) gets its wait on top: it grants
//!   it itself through the [`Budget`] in the request's extensions;
//! * a change of a handler (`PUT`, `POST`, `DELETE` under
//!   `/v1/handlers/`) compiles a module or drains the running version,
//!   which is the server's own work rather than the store's:
//!   [`HANDLER_CHANGE_FACTOR`] times the timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::error::ApiError;
use super::state::AppState;
use crate::backend::Error;

/// The request timeout when nothing else is configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How many request timeouts a handler change may take.
pub const HANDLER_CHANGE_FACTOR: u32 = 10;

/// Time a request's handler grants itself beyond the request timeout (a
/// long poll's wait); found in the request's extensions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Budget(Arc<AtomicU64>);

impl Budget {
    /// Adds `extra` to the request's time.
    pub(crate) fn grant(&self, extra: Duration) {
        let ms = u64::try_from(extra.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::Relaxed);
    }

    fn granted(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// Middleware: answers 503 for a request still running at its deadline
/// (module doc).
pub(crate) async fn bound(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let reads_only = method == Method::GET || method == Method::HEAD;
    let changes_a_handler = !reads_only
        && request
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|path| path.as_str().starts_with("/v1/handlers/"));
    let mut limit = state.settings.request_timeout;
    if changes_a_handler {
        limit *= HANDLER_CHANGE_FACTOR;
    }
    let budget = Budget::default();
    request.extensions_mut().insert(budget.clone());
    let started = Instant::now();
    let answer = next.run(request);
    tokio::pin!(answer);
    loop {
        let deadline = started + limit + budget.granted();
        tokio::select! {
            response = &mut answer => return response,
            () = tokio::time::sleep_until(deadline) => {
                // The handler may have granted itself more meanwhile.
                if Instant::now() >= started + limit + budget.granted() {
                    return timed_out(reads_only, limit + budget.granted());
                }
            }
        }
    }
}

/// The answer of a request that ran out of time.
fn timed_out(reads_only: bool, after: Duration) -> Response {
    let ms = after.as_millis();
    let error = if reads_only {
        Error::BackendUnavailable(format!(
            "the request did not finish within {ms} ms (the request timeout)"
        ))
    } else {
        Error::Ambiguous(format!(
            "the request did not finish within {ms} ms (the request timeout); what it changed may have been applied"
        ))
    };
    ApiError::Backend(error).into_response()
}

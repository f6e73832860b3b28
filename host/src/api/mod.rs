//! The HTTP API: axum routers per resource over one
//! [`AppState`], one [`ApiError`] for every failure, and the OpenAPI
//! document generated from the handlers.
//!
//! Module map:
//! - `streams` — streams and events (create, list, get, append, read, query).
//! - `groups` — consumer groups, leases (fetch with long polls, settle), recovery.
//! - `handlers` — WebAssembly handlers: deploy, hot swap, rollback, pause, remove.
//! - `health` — `/healthz`, `/readyz`, `/metrics`.
//! - `delete` — deleting streams and groups (`?confirm=true`, `force`).
//! - `clock` — `/v1/test/clock`, live only with the test clock.
//! - `nodes` — `/v1/nodes`; `whoami` — `/v1/whoami`, what the caller's token may do.
//! - `summary` — `/v1/groups`, every group's figures at once; `samples` —
//!   `/v1/metrics/samples`, the recent sampled figures (the console's plots).
//! - `dto` — the wire format; `extract` — extractors that refuse bad input as JSON errors.
//! - `auth`, `metrics` — middleware; `openapi` — the document.
//! - `ui` — the web console at `/ui` (static files; not in the document).
//!
//! [`router`] builds the whole app without a socket (tests drive it with
//! `tower::ServiceExt::oneshot`); [`serve`] runs it on a listener until a
//! shutdown future completes, then drains.

mod auth;
mod clock;
mod delete;
pub(crate) mod dto;
mod error;
mod extract;
mod groups;
#[cfg(feature = "wasm")]
mod handlers;
mod health;
mod metrics;
mod nodes;
mod openapi;
mod samples;
mod state;
mod streams;
mod summary;
mod timeout;
pub mod tls;
mod ui;
mod whoami;

#[cfg(test)]
mod tests;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use error::ApiError;
pub use state::{ApiSettings, AppState, DEFAULT_BODY_LIMIT, NamedToken};
pub use timeout::{DEFAULT_REQUEST_TIMEOUT, HANDLER_CHANGE_FACTOR};

/// The whole application: every route, the fallbacks, and the middleware.
pub fn router(state: AppState) -> Router {
    let app = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(streams::router())
        .merge(groups::router())
        .merge(delete::router())
        .merge(clock::router())
        .merge(nodes::router())
        .merge(whoami::router())
        .merge(summary::router())
        .merge(samples::router())
        .merge(health::router());
    #[cfg(feature = "wasm")]
    let app = app.merge(handlers::router());
    let (routes, mut doc) = app.split_for_parts();
    openapi::add_common_responses(&mut doc);
    openapi::name_parameters(&mut doc);
    if !state.settings.auth_required() {
        openapi::no_token_needed(&mut doc);
    }
    #[cfg(feature = "wasm")]
    openapi::handler_log_parameters(
        &mut doc,
        state
            .handlers
            .as_ref()
            .map_or(crate::handler_logs::MAX_LOG_LINES, |registry| {
                registry.logs().capacity()
            }),
    );
    openapi::open_routes_need_no_auth(&mut doc);
    let document = openapi::Document::new(&doc);

    let routes = routes
        .route("/v1/openapi.json", get(move || async move { document }))
        // Merged after the document is built: the console is no API route.
        .merge(ui::router());

    routes
        .fallback(error::route_not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        // The last layer added runs first: tracing, metrics (so every
        // answer is counted, 401s and 413s included, and 5xx detail is
        // logged), auth, the request timeout, a panic turned into a 500
        // JSON answer, and the body limit the JSON extractors enforce.
        .layer(DefaultBodyLimit::max(state.settings.body_limit))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(from_fn_with_state(state.clone(), timeout::bound))
        .layer(from_fn_with_state(state.clone(), auth::require_token))
        .layer(from_fn_with_state(state.metrics.clone(), metrics::track))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` completes; then stops
/// accepting, wakes long polls so they answer at once, and waits for
/// in-flight requests to finish. `listener` is a [`tokio::net::TcpListener`] for plain
/// HTTP or a [`tls::TlsListener`] for HTTPS.
pub async fn serve<L>(
    listener: L,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let app = router(state.clone());
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: finishing in-flight requests");
        state.start_draining();
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await
}

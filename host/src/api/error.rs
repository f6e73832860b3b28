//! One error type for every way a request can fail, and one JSON shape for
//! all of them: `{"error": {"code": "...", "message": "..."}}`.
//!
//! Backend errors keep their portable code and get the status listed in
//! `docs/errors.md#http-statuses`. Extractor rejections (bad JSON, wrong content type, oversized
//! bodies, bad path or query parameters) are converted here too, so no
//! plain-text axum rejection ever reaches a client. Server-side failures
//! answer with a generic message; the detail travels to the metrics
//! middleware in an [`ErrorReport`] response extension and is logged there,
//! which keeps `into_response` free of side effects.

use std::any::Any;

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::backend::Error;
use crate::model::ValidationError;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// A backend call failed.
    Backend(Error),
    /// The API refused the request before calling the backend, with a code
    /// of the shared vocabulary (`invalid`, `confirm_required`, …).
    Refused(Error),
    /// No or a wrong bearer token.
    Unauthorized(&'static str),
    /// A valid token that does not allow this request (the read token on
    /// a route that changes something).
    Forbidden(&'static str),
    /// No such route (or a route that is switched off).
    NotFound(String),
    /// The path exists, the method does not.
    MethodNotAllowed,
    /// The body is larger than the configured limit.
    PayloadTooLarge(String),
    /// The body is not `application/json`.
    UnsupportedMediaType(String),
    /// A delete of what a handler consumes, without `force`; the text names
    /// the handlers.
    HandlerBound(String),
    /// Something broke inside the server; the text is logged, never shown.
    Internal(String),
    /// A handler operation was refused.
    #[cfg(feature = "wasm")]
    Handler(crate::handlers::RegistryError),
}

impl ApiError {
    /// Shorthand for an `invalid` refusal naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Refused(Error::invalid(field, message))
    }

    /// The HTTP status (`docs/errors.md#http-statuses`).
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Backend(e) | ApiError::Refused(e) => backend_status(e),
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::HandlerBound(_) => StatusCode::CONFLICT,
            #[cfg(feature = "wasm")]
            ApiError::Handler(e) => {
                use crate::handlers::RegistryError as R;
                match e {
                    R::NotFound(_) => StatusCode::NOT_FOUND,
                    R::Manifest(_) | R::Module(_) | R::InvalidCanary(_) => StatusCode::BAD_REQUEST,
                    R::NoPrevious(_) | R::CanaryRunning { .. } | R::NoCanary(_) => {
                        StatusCode::CONFLICT
                    }
                    R::Backend(b) => backend_status(b),
                    R::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
                }
            }
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Backend(e) | ApiError::Refused(e) => e.code(),
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::Internal(_) => "internal",
            ApiError::HandlerBound(_) => "handler_bound",
            #[cfg(feature = "wasm")]
            ApiError::Handler(e) => {
                use crate::handlers::RegistryError as R;
                match e {
                    R::NotFound(_) => "handler_not_found",
                    R::Manifest(_) => "invalid_manifest",
                    R::Module(_) => "invalid_module",
                    R::NoPrevious(_) => "no_previous_version",
                    R::InvalidCanary(_) => "invalid_canary",
                    R::CanaryRunning { .. } => "canary_running",
                    R::NoCanary(_) => "no_canary",
                    R::Backend(b) => b.code(),
                    R::Storage(_) => "internal",
                }
            }
        }
    }

    /// The text a client sees. Server-side detail (driver messages, host
    /// names) is withheld: it is logged instead.
    fn public_message(&self) -> String {
        match self {
            ApiError::Backend(Error::BackendUnavailable(_)) => {
                "the backend is unavailable; nothing was done, retry later".into()
            }
            ApiError::Backend(Error::Ambiguous(_)) => {
                "the backend did not confirm the outcome; the write may or may not have been applied, retry idempotently".into()
            }
            ApiError::Backend(Error::StorageFull(_)) => {
                "the store has no space left; nothing was written, retry once space is freed".into()
            }
            ApiError::Backend(Error::Failed(_)) | ApiError::Internal(_) => {
                "internal error; see the server log".into()
            }
            ApiError::Backend(e) | ApiError::Refused(e) => e.to_string(),
            ApiError::Unauthorized(why) | ApiError::Forbidden(why) => (*why).to_owned(),
            ApiError::NotFound(what) | ApiError::HandlerBound(what) => what.clone(),
            ApiError::MethodNotAllowed => "method not allowed on this path".into(),
            ApiError::PayloadTooLarge(why) | ApiError::UnsupportedMediaType(why) => why.clone(),
            #[cfg(feature = "wasm")]
            ApiError::Handler(crate::handlers::RegistryError::Storage(_)) => {
                "internal error; see the server log".into()
            }
            #[cfg(feature = "wasm")]
            ApiError::Handler(e) => e.to_string(),
        }
    }
}

fn backend_status(e: &Error) -> StatusCode {
    match e {
        Error::StreamNotFound(_) | Error::GroupNotFound { .. } => StatusCode::NOT_FOUND,
        Error::AlreadyExists(_) | Error::StaleLease | Error::ReceiptMismatch => {
            StatusCode::CONFLICT
        }
        Error::EventRemoved(_) => StatusCode::GONE,
        Error::CursorNotFound(_)
        | Error::ConfirmRequired
        | Error::InvalidPartition { .. }
        | Error::InvalidPartitionCount { .. }
        | Error::InvalidReplayOpts(_)
        | Error::Invalid(_) => StatusCode::BAD_REQUEST,
        Error::BackendUnavailable(_) | Error::Ambiguous(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::StorageFull(_) => StatusCode::INSUFFICIENT_STORAGE,
        Error::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    pub(crate) error: ErrorDetail,
}

/// A code and a message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// Stable and machine-readable: `stream_not_found`, `stale_lease`, `invalid`, …
    pub(crate) code: String,
    /// For people.
    pub(crate) message: String,
}

impl ErrorDetail {
    /// The detail a client sees for `error`.
    pub(crate) fn of(error: &ApiError) -> Self {
        Self {
            code: error.code().to_owned(),
            message: error.public_message(),
        }
    }
}

/// Attached to error responses so the metrics middleware can count backend
/// failures and log server-side detail the client does not see.
#[derive(Debug, Clone)]
pub(crate) struct ErrorReport {
    /// The error code.
    pub(crate) code: &'static str,
    /// The error came out of a backend call.
    pub(crate) from_backend: bool,
    /// The full internal description.
    pub(crate) detail: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let report = ErrorReport {
            code: self.code(),
            from_backend: matches!(self, ApiError::Backend(_)),
            detail: match &self {
                ApiError::Backend(e) | ApiError::Refused(e) => e.to_string(),
                ApiError::Internal(detail) => detail.clone(),
                other => other.public_message(),
            },
        };
        let body = ErrorBody {
            error: ErrorDetail::of(&self),
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Backend(Error::BackendUnavailable(_) | Error::Ambiguous(_)) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response.extensions_mut().insert(report);
        response
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Backend(e)
    }
}

#[cfg(feature = "wasm")]
impl From<crate::handlers::RegistryError> for ApiError {
    fn from(e: crate::handlers::RegistryError) -> Self {
        ApiError::Handler(e)
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        ApiError::Refused(Error::Invalid(e))
    }
}

/// Sorts a body rejection by its status: too large, wrong media type, or
/// bad input (axum's 422 for well-formed JSON of the wrong shape is a 400
/// here, as all invalid input has one status: `docs/errors.md#http-statuses`).
fn body_rejection(status: StatusCode, text: String) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::PayloadTooLarge("the request body exceeds the server's size limit".into())
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType(
            "expected a JSON body with Content-Type: application/json".into(),
        ),
        s if s.is_server_error() => ApiError::Internal(text),
        _ => ApiError::invalid("body", text),
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        body_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        body_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::invalid("query", rejection.body_text())
    }
}

/// Fallback for unknown routes.
pub(crate) async fn route_not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

/// Fallback for known paths with an unsupported method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Turns a panic in a handler into a 500 JSON response (the server keeps running).
pub(crate) fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a handler panicked".into());
    ApiError::Internal(format!("panic: {detail}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GroupName, StreamName};

    #[test]
    fn every_backend_error_gets_its_documented_status() {
        let stream = StreamName::parse("s").unwrap();
        let cases = [
            (Error::StreamNotFound(stream.clone()), 404),
            (
                Error::GroupNotFound {
                    stream,
                    group: GroupName::parse("g").unwrap(),
                },
                404,
            ),
            (Error::AlreadyExists("stream s".into()), 409),
            (Error::StaleLease, 409),
            (Error::EventRemoved("e1".into()), 410),
            (Error::ReceiptMismatch, 409),
            (Error::CursorNotFound("x".into()), 400),
            (Error::ConfirmRequired, 400),
            (
                Error::InvalidPartition {
                    partition: 2,
                    partition_count: 1,
                },
                400,
            ),
            (Error::InvalidPartitionCount { got: 0, max: 1024 }, 400),
            (Error::InvalidReplayOpts("x".into()), 400),
            (Error::invalid("limit", "too big"), 400),
            (Error::BackendUnavailable("x".into()), 503),
            (Error::Ambiguous("x".into()), 503),
            (Error::StorageFull("x".into()), 507),
            (Error::Failed("x".into()), 500),
        ];
        for (error, status) in cases {
            let code = error.code();
            let api = ApiError::Backend(error);
            assert_eq!(api.status().as_u16(), status, "{code}");
            assert_eq!(api.code(), code);
        }
    }

    #[test]
    fn server_side_detail_stays_out_of_the_message() {
        for error in [
            Error::BackendUnavailable("db.internal:5432 refused".into()),
            Error::Ambiguous("db.internal:5432 reset".into()),
            Error::StorageFull("db.internal:5432 disk full".into()),
            Error::Failed("db.internal:5432 constraint".into()),
        ] {
            let message = ErrorDetail::of(&ApiError::Backend(error)).message;
            assert!(!message.contains("db.internal"), "{message}");
        }
        let internal = ErrorDetail::of(&ApiError::Internal("secret path /etc".into()));
        assert!(!internal.message.contains("/etc"));
        let client = ErrorDetail::of(&ApiError::Backend(Error::StaleLease));
        assert!(
            client.message.contains("stale lease"),
            "client errors explain themselves"
        );
    }

    #[test]
    fn panics_become_500_json() {
        let response = panic_response(Box::new("boom"));
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let report = response.extensions().get::<ErrorReport>().unwrap();
        assert_eq!(report.code, "internal");
        assert!(report.detail.contains("boom"));
    }
}

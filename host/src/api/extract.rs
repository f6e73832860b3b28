//! Extractors that refuse bad input with an [`ApiError`] (and so with the
//! one JSON error shape) instead of axum's plain-text rejections.
//!
//! Path parameters are parsed into the model's validated names here, once,
//! so handlers only ever see a [`StreamName`] or [`GroupName`] that is
//! known to be well formed.

use std::str::FromStr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::model::{GroupName, StreamName, ValidationError};

/// A JSON request body. Malformed JSON, a wrong shape, a body that is not
/// a JSON object, a missing or wrong `Content-Type` and an oversized body
/// all become [`ApiError`]s.
#[derive(Debug)]
pub(crate) struct AppJson<T>(pub(crate) T);

impl<S, T> FromRequest<S> for AppJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_bytes(req, state).await?;
        an_object(&bytes)?;
        let Json(value) = Json::<T>::from_bytes(&bytes)?;
        Ok(Self(value))
    }
}

/// Any JSON value as a body, for the routes that read it field by field
/// and answer a wrong shape with their own codes (replay, reset).
#[derive(Debug)]
pub(crate) struct AnyJson(pub(crate) serde_json::Value);

impl<S: Send + Sync> FromRequest<S> for AnyJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_bytes(req, state).await?;
        let Json(value) = Json::from_bytes(&bytes)?;
        Ok(Self(value))
    }
}

/// The bytes of a body sent as JSON.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    if !is_json(req.headers()) {
        return Err(ApiError::UnsupportedMediaType(
            "expected a JSON body with Content-Type: application/json".into(),
        ));
    }
    Ok(Bytes::from_request(req, state).await?)
}

/// Refuses a body whose JSON is not an object. Every request body is one
/// (docs/http.md#conventions); serde alone would also read a struct from
/// an array of its fields in order (`["s2"]` as `{"name": "s2"}`), and
/// from a short one when the missing fields have defaults. An empty body is
/// left to the parser, which says it is empty.
pub(crate) fn an_object(bytes: &[u8]) -> Result<(), ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => Ok(()),
        Some(_) => Err(ApiError::invalid("body", "the body must be a JSON object")),
    }
}

/// Like [`AppJson`], but an empty body means "all defaults", so requests
/// whose fields are all optional (`fetch`) can be sent without one.
#[derive(Debug)]
pub(crate) struct JsonOrEmpty<T>(pub(crate) T);

impl<S, T> FromRequest<S> for JsonOrEmpty<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = is_json(req.headers());
        let bytes = Bytes::from_request(req, state).await?;
        if bytes.is_empty() {
            return Ok(Self(T::default()));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType(
                "expected a JSON body with Content-Type: application/json".into(),
            ));
        }
        an_object(&bytes)?;
        let Json(value) = Json::<T>::from_bytes(&bytes)?;
        Ok(Self(value))
    }
}

/// `application/json` or `application/<something>+json`, as axum's `Json`
/// accepts.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

/// Query-string parameters; unknown or malformed ones are refused.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct AppQuery<T>(pub(crate) T);

/// The `{stream}` path parameter, validated.
#[derive(Debug)]
pub(crate) struct StreamPath(pub(crate) StreamName);

impl<S: Send + Sync> FromRequestParts<S> for StreamPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = raw_params(parts, state).await?;
        Ok(Self(param(&params, "stream")?))
    }
}

/// The `{stream}` and `{group}` path parameters, validated.
#[derive(Debug)]
pub(crate) struct GroupPath(pub(crate) StreamName, pub(crate) GroupName);

impl<S: Send + Sync> FromRequestParts<S> for GroupPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = raw_params(parts, state).await?;
        Ok(Self(param(&params, "stream")?, param(&params, "group")?))
    }
}

async fn raw_params<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
) -> Result<RawPathParams, ApiError> {
    RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|rejection| {
            if rejection.status().is_client_error() {
                ApiError::invalid("path", rejection.body_text())
            } else {
                ApiError::Internal(rejection.body_text())
            }
        })
}

fn param<T>(params: &RawPathParams, name: &str) -> Result<T, ApiError>
where
    T: FromStr<Err = ValidationError>,
{
    let raw = params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .ok_or_else(|| ApiError::Internal(format!("the route has no {{{name}}} parameter")))?;
    Ok(raw.parse()?)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn only_json_objects_are_bodies() {
        for body in [&b"{}"[..], b"  {\"a\": 1}", b"", b"   "] {
            assert!(an_object(body).is_ok(), "{body:?}");
        }
        for body in [&b"[\"s2\"]"[..], b"[]", b" 5", b"\"x\"", b"null", b"true"] {
            let refused = an_object(body).expect_err("not an object");
            assert_eq!(refused.code(), "invalid", "{body:?}");
        }
    }

    #[test]
    fn json_content_types_are_recognised_like_axum_does() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            is_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("application/json; charset=utf-8"));
        assert!(with("Application/JSON"));
        assert!(with("application/vnd.rheo+json"));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!is_json(&HeaderMap::new()));
    }
}

//! Bearer keys to organizations, with the two 401 shapes the platform uses.

use axum::http::HeaderMap;

use super::api_error::ApiError;
use super::state::Shared;

/// The key of `Authorization: Bearer <key>` (scheme case-insensitive).
pub(crate) fn bearer_key(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, key) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim()).filter(|k| !k.is_empty())
}

pub(crate) fn org_of(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    bearer_key(headers).and_then(|key| shared.org_of_key(key))
}

/// Organization of the caller, or 401 in the `{errors: [...]}` envelope (files, models).
pub(crate) fn require_org(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    org_of(shared, headers).ok_or_else(ApiError::unauthorized_envelope)
}

/// Organization of the caller, or the legacy 401 `{detail}` (`/query`).
pub(crate) fn require_org_detail(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    org_of(shared, headers).ok_or_else(ApiError::unauthorized_detail)
}

//! Bearer keys to organizations and roles, with the two 401 shapes the platform uses.

use std::str::FromStr;

use axum::http::HeaderMap;

use super::api_error::ApiError;
use super::state::Shared;

/// A key holder's role in its organization, for the spec's blueprint rules (admin for an
/// organization blueprint, super-admin for a canonical one), which the agents routes enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Member,
    Admin,
    SuperAdmin,
}

impl Role {
    pub const NAMES: &'static [&'static str] = &["member", "admin", "super_admin"];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Admin => "admin",
            Role::SuperAdmin => "super_admin",
        }
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "member" => Ok(Role::Member),
            "admin" => Ok(Role::Admin),
            "super_admin" => Ok(Role::SuperAdmin),
            other => Err(format!("role is {other:?}; it takes one of {}", Role::NAMES.join(", "))),
        }
    }
}

/// Who holds a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyInfo {
    pub org: String,
    pub role: Role,
}

/// The holder of the caller's key, for handlers that need the role as well as the organization.
pub(crate) fn caller(shared: &Shared, headers: &HeaderMap) -> Option<KeyInfo> {
    bearer_key(headers).and_then(|key| shared.key_info(key))
}

/// The key of `Authorization: Bearer <key>` (scheme case-insensitive).
pub(crate) fn bearer_key(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, key) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim()).filter(|k| !k.is_empty())
}

pub(crate) fn org_of(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    caller(shared, headers).map(|k| k.org)
}

/// Organization of the caller, or 401 in the `{errors: [...]}` envelope (files, models).
pub(crate) fn require_org(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    org_of(shared, headers).ok_or_else(ApiError::unauthorized_envelope)
}

/// Organization of the caller, or the legacy 401 `{detail}` (`/query`).
pub(crate) fn require_org_detail(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    org_of(shared, headers).ok_or_else(ApiError::unauthorized_detail)
}

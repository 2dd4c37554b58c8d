//! `GET /models`: the model catalog the emulator serves, with the spec's filters.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{json, Value};

use super::api_error::ApiError;
use super::auth;
use super::query::validate::Family;
use super::state::Shared;

pub const MODEL_IDS: &[&str] = &[
    "Reasoner::c2_4_7b_251215a172f6d7",
    "Reasoner::c2_5_8b_260413b723a9ab",
    "Encoder::encoder_embeddings_01",
];

fn description(id: &str) -> &'static str {
    match id {
        "Reasoner::c2_4_7b_251215a172f6d7" => "Emulated stand-in for the 4.7B reasoning model: deterministic text describing its inputs.",
        "Reasoner::c2_5_8b_260413b723a9ab" => "Emulated stand-in for the 5.8B reasoning model: deterministic text describing its inputs.",
        _ => "Emulated stand-in for the numeric encoder: deterministic 768-dimension embeddings per channel (random projection).",
    }
}

pub(crate) fn family_of(model: &str) -> Option<Family> {
    if !MODEL_IDS.contains(&model) {
        return None;
    }
    if model.starts_with("Encoder::") {
        Some(Family::Encoder)
    } else {
        Some(Family::Reasoner)
    }
}

fn record(id: &str) -> Value {
    let (family, variant) = id.split_once("::").unwrap_or((id, ""));
    json!({
        "id": id,
        "model_family": family,
        "variant": variant,
        "description": description(id),
        // Every emulated model is a platform model; `scope=org` lists none.
        "scope": "platform",
    })
}

pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    auth::require_org(&shared, &headers)?;
    let mut family = None;
    let mut scope = "all".to_string();
    let mut search = None;
    let mut variant = None;
    for (name, value) in url::form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "model_family" if !value.is_empty() => family = Some(value.to_ascii_lowercase()),
            "scope" if !value.is_empty() => scope = value.into_owned(),
            "search" if !value.is_empty() => search = Some(value.to_lowercase()),
            "variant" if !value.is_empty() => variant = Some(value.into_owned()),
            _ => {}
        }
    }
    if let Some(f) = &family {
        if f != "reasoner" && f != "encoder" {
            return Err(ApiError::invalid_request(format!(
                "Unknown model_family {f:?}: expected Reasoner or Encoder."
            )));
        }
    }
    if !crate::wire::models::MODEL_SCOPES.contains(&scope.as_str()) {
        return Err(ApiError::invalid_request(format!(
            "Unknown scope {scope:?}: expected platform, org or all."
        )));
    }
    let data: Vec<Value> = MODEL_IDS
        .iter()
        .map(|id| record(id))
        .filter(|m| {
            let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let fam_ok = family.as_ref().map_or(true, |f| field("model_family").eq_ignore_ascii_case(f));
            let scope_ok = scope == "all" || field("scope") == scope;
            let variant_ok = variant.as_ref().map_or(true, |v| field("variant").eq_ignore_ascii_case(v));
            let search_ok = search.as_ref().map_or(true, |s| {
                ["id", "description", "model_family", "variant"]
                    .iter()
                    .any(|k| field(k).to_lowercase().contains(s.as_str()))
            });
            fam_ok && scope_ok && variant_ok && search_ok
        })
        .collect();
    Ok(Json(json!({ "data": data, "has_more": false, "next_cursor": null })))
}

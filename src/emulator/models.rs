//! `GET /models`: the caller's organization's catalogue, with the spec's filters.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{json, Value};

use super::api_error::ApiError;
use super::auth;
use super::catalogue::ModelEntry;
use super::paging::{page, Params};
use super::state::Shared;
use crate::wire::models::ModelFamily;

fn description(entry: &ModelEntry) -> String {
    match entry.family {
        ModelFamily::Reasoner => format!(
            "Emulated stand-in for the reasoning model {}: deterministic text describing its inputs.",
            entry.version()
        ),
        ModelFamily::Encoder => format!(
            "Emulated stand-in for the numeric encoder {}: deterministic 768-dimension embeddings per channel (random projection).",
            entry.version()
        ),
    }
}

fn record(entry: &ModelEntry) -> Value {
    json!({
        "id": entry.id,
        // The id's own prefix, as the platform lists it; an id without one is listed under
        // its family's neutral name.
        "model_family": entry.prefix().or(entry.family.prefixes().next()),
        "variant": entry.version(),
        "description": description(entry),
        "scope": if entry.is_platform() { "platform" } else { "org" },
    })
}

pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let catalogue = shared.catalogue_for(&org);
    let mut family = None;
    let mut scope = "all".to_string();
    let mut search = None;
    let mut variant = None;
    for (name, value) in url::form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "model_family" if !value.is_empty() => family = Some(value.into_owned()),
            "scope" if !value.is_empty() => scope = value.into_owned(),
            "search" if !value.is_empty() => search = Some(value.to_lowercase()),
            "variant" if !value.is_empty() => variant = Some(value.into_owned()),
            _ => {}
        }
    }
    let selected: Vec<&ModelEntry> = match &family {
        None => catalogue.entries().iter().collect(),
        Some(f) => catalogue.select_family(f).ok_or_else(|| {
            ApiError::invalid_request(format!(
                "Unknown model_family {f:?}: expected {}, or a family of this organization's own models.",
                [ModelFamily::Reasoner, ModelFamily::Encoder]
                    .map(|fam| fam.prefixes().collect::<Vec<_>>().join(" or "))
                    .join(", ")
            ))
        })?,
    };
    if !crate::wire::models::MODEL_SCOPES.contains(&scope.as_str()) {
        return Err(ApiError::invalid_request(format!(
            "Unknown scope {scope:?}: expected platform, org or all."
        )));
    }
    let data: Vec<(String, Value)> = selected
        .into_iter()
        .map(|entry| (entry.id.clone(), record(entry)))
        .filter(|(_, m)| {
            let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let scope_ok = scope == "all" || field("scope") == scope;
            let variant_ok = variant.as_ref().is_none_or(|v| field("variant").eq_ignore_ascii_case(v));
            let search_ok = search.as_ref().is_none_or(|s| {
                ["id", "description", "model_family", "variant"]
                    .iter()
                    .any(|k| field(k).to_lowercase().contains(s.as_str()))
            });
            scope_ok && variant_ok && search_ok
        })
        .collect();
    // A cursor list since 1.1.11, paged like every other: `limit`, `after`/`before` (an id),
    // `Emulator(page_size=...)` by default.
    Ok(Json(page(data, &Params::parse(query.as_deref()), shared.page_size)?))
}

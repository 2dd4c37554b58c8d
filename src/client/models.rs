//! `GET /models`: the models the organization may use.

use serde_json::Value;

use super::error::Error;
use super::pagination::normalize_page;
use super::transport::{Call, Transport};
use crate::wire::models::MODEL_SCOPES;
use crate::wire::page::CursorPage;

#[derive(Debug, Default, Clone)]
pub struct ModelFilters {
    pub model_family: Option<String>,
    pub scope: Option<String>,
    pub search: Option<String>,
    pub variant: Option<String>,
}

pub async fn list_page(
    transport: &Transport,
    filters: &ModelFilters,
    cursor: Option<&str>,
) -> Result<CursorPage<Value>, Error> {
    if let Some(scope) = &filters.scope {
        if !MODEL_SCOPES.contains(&scope.as_str()) {
            return Err(Error::invalid_argument(
                "scope",
                format!("is {scope:?}; it takes one of {}", MODEL_SCOPES.join(", ")),
            ));
        }
    }
    let mut call = Call::get(transport.config.url("/models"));
    for (name, value) in [
        ("model_family", &filters.model_family),
        ("scope", &filters.scope),
        ("search", &filters.search),
        ("variant", &filters.variant),
    ] {
        if let Some(v) = value {
            call = call.query_param(name, v.clone());
        }
    }
    if let Some(c) = cursor {
        call = call.query_param("after", c);
    }
    let body: Value = transport.json(&call).await?;
    Ok(normalize_page(body))
}

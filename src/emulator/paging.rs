//! Query parameters and cursor pages of the newer list endpoints (agents now; batch and
//! fine-tuning lists later): `limit` 1 to 1000, `after`/`before` exclusive, booleans as lowercase
//! `true`/`false` only, and `{data, has_more, next_cursor}`.
//!
//! Cursors: the spec calls `after` "older than this id" and the platform's own client passes "the
//! ID of the last item from the previous page", so a cursor is an item's id; one that names no
//! item of the list is 400 `invalid_cursor`, as a made-up cursor is on the live service.

use serde_json::{json, Value};

use super::api_error::ApiError;

pub const MAX_LIMIT: usize = 1000;
/// The platform's default page size ("Blueprint list `limit` ... default 100").
pub const DEFAULT_LIMIT: usize = 100;

pub(crate) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn parse(raw: Option<&str>) -> Self {
        let pairs = url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()).into_owned().collect();
        Params { pairs }
    }

    /// The same parameters with `from` read as `to` (the batch lists' `cursor` is the
    /// `after` of the other cursor lists).
    pub fn renamed(&self, from: &str, to: &str) -> Params {
        let pairs = self.pairs.iter().map(|(k, v)| (if k == from { to.to_string() } else { k.clone() }, v.clone())).collect();
        Params { pairs }
    }

    /// A non-empty value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
    }

    /// A boolean parameter: exactly `true` or `false`, as the agents service takes them (a
    /// Python `True` rendered as `True` is a 400 there).
    pub fn flag(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(ApiError::invalid_request(format!(
                "Query parameter '{name}' must be true or false (lowercase), got {other:?}."
            ))),
        }
    }

    pub fn limit(&self, default: usize) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(default),
            Some(text) => match text.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
                _ => Err(ApiError::invalid_request(format!(
                    "Query parameter 'limit' must be an integer from 1 to {MAX_LIMIT}, got {text:?}."
                ))),
            },
        }
    }
}

/// One page of `items` (already filtered and in list order), each with its id.
pub(crate) fn page(items: Vec<(String, Value)>, params: &Params, default_limit: usize) -> Result<Value, ApiError> {
    page_with(items, params, default_limit, |v| v)
}

/// `page`, rendering only the items of the page: a list of 10,000 records renders 100 per page,
/// not 10,000.
pub(crate) fn page_with<T>(
    items: Vec<(String, T)>,
    params: &Params,
    default_limit: usize,
    render: impl Fn(T) -> Value,
) -> Result<Value, ApiError> {
    let limit = params.limit(default_limit)?;
    let (after, before) = (params.get("after"), params.get("before"));
    if after.is_some() && before.is_some() {
        return Err(ApiError::invalid_request("Query parameters 'after' and 'before' are mutually exclusive."));
    }
    let position = |cursor: &str| {
        items.iter().position(|(id, _)| id == cursor).ok_or_else(|| {
            ApiError::bad_request("invalid_cursor", format!("Cursor {cursor:?} is not valid."))
                .with_suggestion("Use next_cursor from a previous page, or an id from the list, as given.")
        })
    };
    let (start, end) = match (after, before) {
        (Some(cursor), _) => {
            let start = position(cursor)? + 1;
            (start, (start + limit).min(items.len()))
        }
        (_, Some(cursor)) => {
            let end = position(cursor)?;
            (end.saturating_sub(limit), end)
        }
        _ => (0, limit.min(items.len())),
    };
    let has_more = if before.is_some() { start > 0 } else { end < items.len() };
    let next_cursor = match (has_more, before.is_some()) {
        (false, _) => Value::Null,
        (true, false) => items.get(end.saturating_sub(1)).map_or(Value::Null, |(id, _)| json!(id)),
        (true, true) => items.get(start).map_or(Value::Null, |(id, _)| json!(id)),
    };
    let data: Vec<Value> = items.into_iter().skip(start).take(end - start).map(|(_, v)| render(v)).collect();
    Ok(json!({ "data": data, "has_more": has_more, "next_cursor": next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<(String, Value)> {
        (0..n).map(|i| (format!("id{i}"), json!(i))).collect()
    }

    #[test]
    fn pages_follow_and_refuse_bad_cursors() {
        let p = page(items(5), &Params::parse(Some("limit=2")), 100).unwrap();
        assert_eq!(p, json!({"data": [0, 1], "has_more": true, "next_cursor": "id1"}));
        let p = page(items(5), &Params::parse(Some("limit=2&after=id3")), 100).unwrap();
        assert_eq!(p, json!({"data": [4], "has_more": false, "next_cursor": null}));
        let p = page(items(5), &Params::parse(Some("limit=2&before=id3")), 100).unwrap();
        assert_eq!(p["data"], json!([1, 2]));
        for bad in ["after=nope", "after=id1&before=id3", "limit=0", "limit=1001", "limit=x"] {
            assert_eq!(page(items(5), &Params::parse(Some(bad)), 100).unwrap_err().status.as_u16(), 400, "{bad}");
        }
        assert!(Params::parse(Some("yaml=True")).flag("yaml").is_err());
        assert_eq!(Params::parse(Some("yaml=true")).flag("yaml").unwrap(), Some(true));
    }
}

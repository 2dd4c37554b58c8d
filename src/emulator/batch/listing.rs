//! The batch lists in either release's style (`Emulator(list_style=...)`): the cursor style of
//! 1.1.11 on (`{data, has_more, next_cursor}`, paged with `?limit=N&cursor=<next_cursor>`) and
//! the offset style before it (`{total, offset, limit, <entity>: [...]}`, paged with `offset`).
//! A cursor is the id of the last item of the previous page; one naming no item is 400
//! `invalid_cursor`, as a made-up cursor is on the live service.

use serde_json::{json, Value};

use crate::emulator::api_error::ApiError;
use crate::emulator::options::ListStyle;
use crate::emulator::paging::{page, Params};

/// What a list is called in the offset style, and the job it belongs to (per-job lists carry
/// `job_id`).
pub(crate) struct Entity<'a> {
    pub key: &'a str,
    pub job_id: Option<&'a str>,
}

/// One page of `items` (filtered, in list order, each with its id) in `style`.
pub(crate) fn styled_page(items: Vec<(String, Value)>, params: &Params, default_limit: usize, style: ListStyle,
                          entity: Entity<'_>) -> Result<Value, ApiError> {
    match style {
        ListStyle::Cursor => page(items, &params.renamed("cursor", "after"), default_limit).map_err(ApiError::bare),
        ListStyle::Offset => {
            let limit = params.limit(default_limit).map_err(ApiError::bare)?;
            let offset = match params.get("offset") {
                None => 0,
                Some(text) => text.parse::<usize>().map_err(|_| {
                    ApiError::invalid_request(format!("Query parameter 'offset' must be a non-negative integer, got {text:?}.")).bare()
                })?,
            };
            let total = items.len();
            let rows: Vec<Value> = items.into_iter().skip(offset).take(limit).map(|(_, v)| v).collect();
            let mut answer = json!({"total": total, "offset": offset, "limit": limit, entity.key: rows});
            if let Some(job_id) = entity.job_id {
                answer["job_id"] = json!(job_id);
            }
            Ok(answer)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<(String, Value)> {
        (0..n).map(|i| (format!("id{i}"), json!(i))).collect()
    }

    fn events(job: &str) -> Entity<'_> {
        Entity { key: "events", job_id: Some(job) }
    }

    #[test]
    fn cursor_pages_follow_next_cursor() {
        let p = styled_page(items(5), &Params::parse(Some("limit=2")), 100, ListStyle::Cursor, events("j")).unwrap();
        assert_eq!(p, json!({"data": [0, 1], "has_more": true, "next_cursor": "id1"}));
        let p = styled_page(items(5), &Params::parse(Some("limit=2&cursor=id3")), 100, ListStyle::Cursor, events("j")).unwrap();
        assert_eq!(p, json!({"data": [4], "has_more": false, "next_cursor": null}));
        let p = styled_page(items(5), &Params::parse(None), 3, ListStyle::Cursor, events("j")).unwrap();
        assert_eq!(p["data"], json!([0, 1, 2]), "the default page size");
        let bad = styled_page(items(5), &Params::parse(Some("cursor=made-up")), 100, ListStyle::Cursor, events("j")).unwrap_err();
        assert_eq!((bad.status.as_u16(), bad.code.as_str(), bad.bare), (400, "invalid_cursor", true));
    }

    #[test]
    fn offset_pages_carry_total_and_the_entity_key() {
        let p = styled_page(items(5), &Params::parse(Some("limit=2&offset=2")), 100, ListStyle::Offset, events("j")).unwrap();
        assert_eq!(p, json!({"job_id": "j", "total": 5, "offset": 2, "limit": 2, "events": [2, 3]}));
        let p = styled_page(items(5), &Params::parse(None), 100, ListStyle::Offset, Entity { key: "jobs", job_id: None }).unwrap();
        assert_eq!(p, json!({"total": 5, "offset": 0, "limit": 100, "jobs": [0, 1, 2, 3, 4]}));
        let p = styled_page(items(5), &Params::parse(Some("offset=9")), 100, ListStyle::Offset, events("j")).unwrap();
        assert_eq!(p["events"], json!([]));
        for bad in ["offset=-1", "offset=x", "limit=0"] {
            let e = styled_page(items(5), &Params::parse(Some(bad)), 100, ListStyle::Offset, events("j")).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
        }
    }
}

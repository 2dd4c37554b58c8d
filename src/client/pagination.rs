//! Lists: every page shape the platform has used, normalised to one cursor page.

use serde_json::Value;

use super::error::truncate;
use super::query::json_type;
use crate::wire::page::CursorPage;

/// Reads a list response: `{data, has_more, next_cursor, prev_cursor}` (1.1.11 on), a bare
/// array (some file listings), `{<entity>: [...]}` with a single array field, or the older
/// offset style `{total, offset, limit, <entity>: [...]}`, whose next page is given as the next
/// offset in `next_cursor` (the caller sends it back as `offset`). A page with `has_more` but no
/// cursor is refused: taken as the last page, it would end the list silently with the rest
/// unread; followed without a cursor, it would loop on the first page. Unless `item_cursor`
/// says the list goes on from an item: then the id of the page's item at that end is the cursor.
pub fn normalize_page(body: Value, item_cursor: Option<ItemEnd>) -> Result<CursorPage<Value>, String> {
    Ok(match body {
        Value::Array(items) => CursorPage { data: items, ..Default::default() },
        Value::Object(mut map) => {
            let data = match map.remove("data") {
                Some(Value::Array(items)) => items,
                // Servers write an empty list as null too.
                Some(Value::Null) => Vec::new(),
                Some(other) => return Err(format!("the page's data is {}, not a list", json_type(&other))),
                None => match items_key(&map)? {
                    Some(key) => match map.remove(&key) {
                        Some(Value::Array(items)) => items,
                        _ => Vec::new(),
                    },
                    None => Vec::new(),
                },
            };
            let text = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
            let given = |key: &str| map.get(key).filter(|v| !v.is_null());
            // The offset style: its counts beside no next_cursor (a cursor page may carry counts).
            if let (Some(total), Some(offset), false) =
                (given("total"), given("offset"), map.contains_key("next_cursor"))
            {
                let (total, offset) = (count("total", total)?, count("offset", offset)?);
                let next = offset.saturating_add(data.len() as u64);
                let has_more = !data.is_empty() && next < total;
                return Ok(CursorPage {
                    data,
                    has_more,
                    next_cursor: has_more.then(|| next.to_string()),
                    prev_cursor: None,
                    offset_style: true,
                });
            }
            let has_more = more(map.get("has_more"))?;
            let mut next_cursor = text(map.get("next_cursor"));
            if has_more && next_cursor.is_none() {
                let Some(end) = item_cursor else {
                    return Err("the page says has_more but gives no next_cursor, so the rest of the list cannot be \
                                read"
                        .to_string());
                };
                let edge = match end {
                    ItemEnd::First => data.first(),
                    ItemEnd::Last => data.last(),
                };
                next_cursor = text(edge.and_then(|item| item.get("id")));
                if next_cursor.is_none() {
                    return Err("the page says has_more but gives no next_cursor, nor an item id to go on from, so \
                                the rest of the list cannot be read"
                        .to_string());
                }
            }
            CursorPage { data, has_more, next_cursor, prev_cursor: text(map.get("prev_cursor")), offset_style: false }
        }
        _ => CursorPage::default(),
    })
}

/// Which item of a page gives the next page's cursor, for a list that says `has_more` but may
/// give no `next_cursor` (the spec's fine-tuning lists, whose items' ids are their cursors):
/// the newest item walking towards the newest (`before`), the oldest walking back (`after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemEnd {
    First,
    Last,
}

/// A page's `has_more`: a boolean, or (be liberal in what you accept, the wire notes say) the
/// text `"true"`/`"false"` in any case; absent or null is false (a page without it is the whole
/// list). Anything else is refused: read as false it would end the list short without a word,
/// read as true it would ask for pages that do not exist.
fn more(value: Option<&Value>) -> Result<bool, String> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(more)) => Ok(*more),
        Some(Value::String(text)) if text.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(text)) if text.eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => Err(format!("the page's has_more is {} ({}), not true or false", json_type(other),
                                   truncate(&other.to_string(), 40))),
    }
}

/// An offset-style page's `total` or `offset`: a whole number, or one written as text (`"5"`),
/// read liberally as `has_more` is. Anything else is refused: the page could not be placed in
/// the list, and read as a cursor-style page it would end the list after it.
fn count(name: &str, value: &Value) -> Result<u64, String> {
    let read = match value {
        Value::Number(number) => number.as_u64(),
        Value::String(text) => text.trim().parse::<u64>().ok(),
        _ => None,
    };
    read.ok_or_else(|| {
        format!("the offset-style page's {name} is {} ({}), not a whole number", json_type(value),
                truncate(&value.to_string(), 40))
    })
}

/// Which member of a page without `data` holds its items (the older lists name it after what
/// they list: `files`, `jobs`, `events`...). The page's only list; else its only list not named
/// as a notice (`warnings`, `errors`..., which a newer platform may add, see `SIDE_LISTS`); else
/// its only list of objects. Two lists of objects, or several lists and none of objects but some non-empty, cannot
/// be told apart: refused, since guessing would lose a page's items without a word. `None` when
/// the page has no list at all (an empty page).
fn items_key(map: &serde_json::Map<String, Value>) -> Result<Option<String>, String> {
    let all: Vec<(&String, &Vec<Value>)> = map.iter().filter_map(|(k, v)| v.as_array().map(|a| (k, a))).collect();
    if let [(only, _)] = all.as_slice() {
        return Ok(Some((*only).clone()));
    }
    // The lists a page carries beside its items, named as the platform names its notices: never
    // the items while another list is there (an empty `jobs` beside a `warnings` of objects).
    let arrays: Vec<(&String, &Vec<Value>)> =
        all.iter().copied().filter(|(k, _)| !SIDE_LISTS.contains(&k.as_str())).collect();
    if let [(only, _)] = arrays.as_slice() {
        return Ok(Some((*only).clone()));
    }
    let arrays = if arrays.is_empty() { all } else { arrays };
    let of_records: Vec<&String> =
        arrays.iter().filter(|(_, items)| items.iter().any(Value::is_object)).map(|(k, _)| *k).collect();
    match of_records.as_slice() {
        [one] => Ok(Some((*one).clone())),
        [] if arrays.iter().all(|(_, items)| items.is_empty()) => Ok(None),
        _ => Err(format!(
            "the page has several lists ({}) and none named data, so which one holds the items is unclear",
            arrays.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

const SIDE_LISTS: [&str; 6] = ["warnings", "errors", "warning_messages", "error_messages", "messages", "notices"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn page(body: Value) -> CursorPage<Value> {
        normalize_page(body, None).expect("a readable page")
    }

    #[test]
    fn every_shape() {
        let p = page(json!({"data": [1, 2], "has_more": true, "next_cursor": "c2", "prev_cursor": null}));
        assert_eq!((p.data.len(), p.has_more, p.next_cursor.as_deref()), (2, true, Some("c2")));
        let p = page(json!([1, 2, 3]));
        assert_eq!((p.data.len(), p.has_more), (3, false));
        let p = page(json!({"files": [1], "total": 1}));
        assert_eq!(p.data.len(), 1);
        let p = page(json!({"data": [1], "has_more": false, "next_cursor": null}));
        assert!(!p.has_more && p.next_cursor.is_none());
        let p = page(json!({"data": [1]}));
        assert!(!p.has_more, "a page without has_more is the whole list");
        let p = page(json!({"job_id": "j", "total": 5, "offset": 2, "limit": 2, "events": [1, 2]}));
        assert_eq!((p.data.len(), p.has_more, p.next_cursor.as_deref()), (2, true, Some("4")));
        let p = page(json!({"total": 5, "offset": 4, "limit": 2, "events": [1]}));
        assert!(!p.has_more && p.next_cursor.is_none());
        let p = page(json!({"total": 9, "offset": 0, "events": []}));
        assert!(!p.has_more, "an empty page ends the list whatever total says");
    }

    #[test]
    fn items_beside_other_lists_are_found_or_the_page_is_refused() {
        // A list the platform adds beside the items (warnings) does not hide them.
        let p = page(json!({"total": 3, "offset": 0, "limit": 50, "jobs": [{"id": 1}, {"id": 2}, {"id": 3}], "warnings": []}));
        assert_eq!((p.data.len(), p.has_more), (3, false));
        let p = page(json!({"jobs": [{"id": 1}], "errors": ["late"], "has_more": false}));
        assert_eq!(p.data.len(), 1);
        // An empty list of items beside notices of objects: the items, not the notices.
        let p = page(json!({"total": 0, "offset": 0, "limit": 50, "jobs": [], "warnings": [{"code": "deprecated"}]}));
        assert!(p.data.is_empty());
        assert!(page(json!({"data": null, "has_more": false, "next_cursor": null})).data.is_empty());
        // All empty: an empty page, nothing lost.
        assert!(page(json!({"jobs": [], "warnings": []})).data.is_empty());
        assert!(page(json!({})).data.is_empty());
        for body in [
            json!({"jobs": [{"id": 1}], "inputs": [{"id": 2}]}),
            json!({"names": ["a"], "tags": ["b"]}),
            json!({"data": {"jobs": [{"id": 1}]}}),
            json!({"data": "none"}),
        ] {
            assert!(normalize_page(body.clone(), None).is_err(), "{body}");
        }
    }

    #[test]
    fn has_more_written_as_text_reads_as_its_boolean_and_anything_else_is_refused() {
        for (more, expected) in [(json!("true"), true), (json!("True"), true), (json!("false"), false),
                                 (json!("FALSE"), false), (json!(null), false), (json!(true), true)] {
            let p = page(json!({"data": [1], "has_more": more.clone(), "next_cursor": "c2"}));
            assert_eq!(p.has_more, expected, "{more}");
        }
        for more in [json!(1), json!("yes"), json!([true]), json!({"v": true}), json!("")] {
            let refused = normalize_page(json!({"data": [1], "has_more": more.clone(), "next_cursor": "c2"}), None)
                .expect_err("read as false, the rest of the list would be lost");
            assert!(refused.contains("has_more"), "{refused}: {more}");
        }
    }

    #[test]
    fn offset_counts_written_as_text_keep_the_offset_style() {
        let p = page(json!({"job_id": "j", "total": "5", "offset": "2", "limit": 2, "events": [1, 2]}));
        assert_eq!((p.offset_style, p.has_more, p.next_cursor.as_deref()), (true, true, Some("4")));
        for (total, offset) in [(json!("five"), json!(0)), (json!(5), json!("-1")), (json!(5), json!(1.5)),
                                (json!(true), json!(0)), (json!(5), json!([0]))] {
            let body = json!({"total": total, "offset": offset, "events": [1]});
            let refused = normalize_page(body.clone(), None).expect_err("a count of the wrong type");
            assert!(refused.contains("total") || refused.contains("offset"), "{refused}: {body}");
        }
        // Counts beside a next_cursor are not the page's style: not read, not refused.
        let p = page(json!({"data": [1], "total": "many", "offset": null, "has_more": false, "next_cursor": null}));
        assert!(!p.offset_style && p.data.len() == 1);
    }

    #[test]
    fn more_without_a_cursor_is_refused_not_taken_as_the_end() {
        for body in [
            json!({"data": [1, 2], "has_more": true}),
            json!({"object": "list", "data": [], "has_more": true, "next_cursor": null}),
            json!({"data": [1], "has_more": true, "next_cursor": ""}),
        ] {
            let refused = normalize_page(body.clone(), None).expect_err("the rest of the list would be lost");
            assert!(refused.contains("has_more"), "{refused}: {body}");
        }
    }

    #[test]
    fn an_item_cursor_list_goes_on_from_the_id_at_its_end() {
        let body = json!({"object": "list", "data": [{"id": "ev_2"}, {"id": "ev_1"}], "has_more": true});
        let next = |body: &Value, end| normalize_page(body.clone(), Some(end)).map(|p| p.next_cursor);
        assert_eq!(next(&body, ItemEnd::Last), Ok(Some("ev_1".to_string())));
        assert_eq!(next(&body, ItemEnd::First), Ok(Some("ev_2".to_string())));
        // A cursor the page gives is followed; an item without an id leaves no way on.
        let given = json!({"data": [{"id": "ev_2"}], "has_more": true, "next_cursor": "c9"});
        assert_eq!(next(&given, ItemEnd::Last), Ok(Some("c9".to_string())));
        let anonymous = json!({"data": [{"step": 1}], "has_more": true});
        assert!(next(&anonymous, ItemEnd::Last).is_err_and(|why| why.contains("nor an item id")));
    }
}

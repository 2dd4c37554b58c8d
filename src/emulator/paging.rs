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
    page_placed(items, params, default_limit, render, cursor_place)
}

/// `page_with` for a list in an order of its own (bundles by last run or name), not the ids'
/// order: each item comes with its sort key, `descending` says which way the list runs, and
/// `key_of` gives the key of a cursor's item that has left the list (deleted, or filtered out),
/// which the list's owner still knows. The cursor is placed where that key sorts, so every item
/// still in the list is returned exactly once; a cursor `key_of` does not know is
/// `invalid_cursor`. Keys must be unique (end them with a sequence number).
pub(crate) fn page_sorted<K: Ord, T>(
    items: Vec<(String, K, T)>,
    descending: bool,
    key_of: impl Fn(&str) -> Option<K>,
    params: &Params,
    default_limit: usize,
    render: impl Fn(T) -> Value,
) -> Result<Value, ApiError> {
    let (keys, items): (Vec<K>, Vec<(String, T)>) = items.into_iter().map(|(id, k, v)| (k, (id, v))).unzip();
    page_placed(items, params, default_limit, render, |items, cursor| {
        if let Some(i) = items.iter().position(|(id, _)| id == cursor) {
            return Ok(Place::At(i));
        }
        let key = key_of(cursor).ok_or_else(|| invalid_cursor(cursor))?;
        let ahead = |k: &K| if descending { *k > key } else { *k < key };
        Ok(Place::Before(keys.iter().take_while(|k| ahead(k)).count()))
    })
}

fn page_placed<T>(
    items: Vec<(String, T)>,
    params: &Params,
    default_limit: usize,
    render: impl Fn(T) -> Value,
    cursor_place: impl Fn(&[(String, T)], &str) -> Result<Place, ApiError>,
) -> Result<Value, ApiError> {
    let limit = params.limit(default_limit)?;
    let (after, before) = (params.get("after"), params.get("before"));
    if after.is_some() && before.is_some() {
        return Err(ApiError::invalid_request("Query parameters 'after' and 'before' are mutually exclusive."));
    }
    let (start, end) = match (after, before) {
        (Some(cursor), _) => {
            let start = match cursor_place(&items, cursor)? {
                Place::At(i) => i + 1,
                Place::Before(i) => i,
            };
            (start, (start + limit).min(items.len()))
        }
        (_, Some(cursor)) => {
            let end = match cursor_place(&items, cursor)? {
                Place::At(i) | Place::Before(i) => i,
            };
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

/// Where a cursor sits in a list: at an item, or (an id no longer in the list) just before the
/// item at that index.
enum Place {
    At(usize),
    Before(usize),
}

/// The cursor's place in `items`. An id that has left the list since the previous page (deleted,
/// or no longer matching the filter, as a run that finished does for `status=running`) still
/// marks a place: ids sort in the order they were made (`type_id`, or a counter), and a list in
/// that order or its reverse is cut where the id would be. A cursor of another shape, or a list
/// in some other order, is 400 `invalid_cursor`, as a made-up cursor is on the live service
/// (a list in an order of its own pages with `page_sorted`, which knows its items' keys).
fn cursor_place<T>(items: &[(String, T)], cursor: &str) -> Result<Place, ApiError> {
    if let Some(i) = items.iter().position(|(id, _)| id == cursor) {
        return Ok(Place::At(i));
    }
    let invalid = || invalid_cursor(cursor);
    let key = id_order(cursor).ok_or_else(invalid)?;
    let keys: Vec<IdOrder> = items.iter().map(|(id, _)| id_order(id)).collect::<Option<_>>().ok_or_else(invalid)?;
    // Ids of one kind compare whole. TypeIDs of several kinds (`GET /jobs` lists batch `job_` and
    // fine-tuning `ftj_` jobs together) compare by their bodies, which sort in the order they
    // were made whatever the prefix; counters of different kinds have no common order.
    let is_type_id = |k: &IdOrder| k.1 == TYPE_ID_BODY;
    if keys.iter().any(|k| k.0 != key.0) && !(is_type_id(&key) && keys.iter().all(is_type_id)) {
        return Err(invalid());
    }
    let (key, keys): ((usize, &str), Vec<(usize, &str)>) = ((key.1, key.2), keys.iter().map(|k| (k.1, k.2)).collect());
    let newest_first = keys.windows(2).all(|w| w[0] > w[1]);
    let oldest_first = keys.windows(2).all(|w| w[0] < w[1]);
    match (newest_first, oldest_first) {
        // One item or none: the list reads newest first, as the platform's lists do.
        (true, _) => Ok(Place::Before(keys.iter().take_while(|k| **k > key).count())),
        (false, true) => Ok(Place::Before(keys.iter().take_while(|k| **k < key).count())),
        (false, false) => Err(invalid()),
    }
}

fn invalid_cursor(cursor: &str) -> ApiError {
    ApiError::bad_request("invalid_cursor", format!("Cursor {cursor:?} is not valid."))
        .with_suggestion("Use next_cursor from a previous page, or an id from the list, as given.")
}

/// How an id sorts: its prefix, then a TypeID's fixed-width body as text or a counter as a number.
type IdOrder<'a> = (&'a str, usize, &'a str);

/// The length of a TypeID's body (`agents::store::type_id`).
const TYPE_ID_BODY: usize = 26;

fn id_order(id: &str) -> Option<IdOrder<'_>> {
    let (prefix, body) = id.rsplit_once('_').unwrap_or(("", id));
    let type_id = body.len() == TYPE_ID_BODY && body.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
    let counter = !body.is_empty() && body.len() < 20 && body.bytes().all(|b| b.is_ascii_digit());
    (type_id || counter).then_some((prefix, body.len(), body))
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
        for bad in ["after=nope", "after=id1&before=id3", "after=run_7", "limit=0", "limit=1001", "limit=x"] {
            assert_eq!(page(items(5), &Params::parse(Some(bad)), 100).unwrap_err().status.as_u16(), 400, "{bad}");
        }
        assert!(Params::parse(Some("yaml=True")).flag("yaml").is_err());
    }

    #[test]
    fn type_ids_of_several_kinds_place_a_gone_cursor_by_when_it_was_made() {
        use crate::emulator::agents::store::type_id;
        // GET /jobs: batch and fine-tuning jobs in one list, newest first; `b` has been deleted.
        let (a, b, c, d) = (type_id("ftj"), type_id("job"), type_id("job"), type_id("ftj"));
        let list = vec![(d.clone(), json!("d")), (c.clone(), json!("c")), (a.clone(), json!("a"))];
        let p = page(list.clone(), &Params::parse(Some(&format!("limit=1&after={b}"))), 100).unwrap();
        assert_eq!(p["data"], json!(["a"]));
        let p = page(list, &Params::parse(Some(&format!("before={b}"))), 100).unwrap();
        assert_eq!(p["data"], json!(["d", "c"]));
        // Counters of different kinds have no common order.
        let counters = vec![("run_3".to_string(), json!(3)), ("job_1".to_string(), json!(1))];
        assert!(page(counters, &Params::parse(Some("after=run_2")), 100).is_err());
    }

    #[test]
    fn a_cursor_that_left_the_list_still_marks_its_place() {
        // Newest first, as the lists are; id_5 and id_3 were on an earlier page and are gone now.
        let list = |ids: &[u32]| ids.iter().map(|i| (format!("id_{i}"), json!(i))).collect::<Vec<_>>();
        let p = page(list(&[9, 8, 7, 4, 2, 1]), &Params::parse(Some("limit=2&after=id_5")), 100).unwrap();
        assert_eq!(p, json!({"data": [4, 2], "has_more": true, "next_cursor": "id_2"}));
        let p = page(list(&[9, 8, 7, 4, 2, 1]), &Params::parse(Some("limit=2&before=id_5")), 100).unwrap();
        assert_eq!(p["data"], json!([8, 7]));
        let p = page(list(&[]), &Params::parse(Some("after=id_5")), 100).unwrap();
        assert_eq!(p, json!({"data": [], "has_more": false, "next_cursor": null}));
        // Oldest first (log lines): the place is found the other way round.
        let p = page(list(&[1, 2, 4, 7]), &Params::parse(Some("after=id_3")), 100).unwrap();
        assert_eq!(p["data"], json!([4, 7]));
        // TypeIDs sort by the time they were made.
        let (a, b, c) = (crate::emulator::agents::store::type_id("agt"), crate::emulator::agents::store::type_id("agt"), crate::emulator::agents::store::type_id("agt"));
        let items = vec![(c.clone(), json!("c")), (a.clone(), json!("a"))];
        let p = page(items, &Params::parse(Some(&format!("after={b}"))), 100).unwrap();
        assert_eq!(p["data"], json!(["a"]));
        // Another kind of id, or a list in no id order, is still refused.
        assert!(page(list(&[9, 8]), &Params::parse(Some("after=job_3")), 100).is_err());
        assert!(page(list(&[2, 9, 1]), &Params::parse(Some("after=id_5")), 100).is_err());
        assert_eq!(Params::parse(Some("yaml=true")).flag("yaml").unwrap(), Some(true));
    }

    #[test]
    fn a_list_in_its_own_order_places_a_gone_cursor_by_its_key() {
        // Sorted by name, whose order is not the ids' order; "b" (id_9) was the last item of the
        // previous page and has been deleted since.
        let known = [("id_9", "b"), ("id_1", "c"), ("id_7", "d"), ("id_2", "a")];
        let key_of = |id: &str| known.iter().find(|(i, _)| *i == id).map(|(_, k)| k.to_string());
        let list = |ids: &[&str]| {
            ids.iter().map(|id| (id.to_string(), key_of(id).unwrap(), json!(key_of(id).unwrap()))).collect::<Vec<_>>()
        };
        let p = page_sorted(list(&["id_2", "id_1", "id_7"]), false, key_of, &Params::parse(Some("limit=1&after=id_9")), 100, |v| v).unwrap();
        assert_eq!(p, json!({"data": ["c"], "has_more": true, "next_cursor": "id_1"}));
        let p = page_sorted(list(&["id_7", "id_1", "id_2"]), true, key_of, &Params::parse(Some("after=id_9")), 100, |v| v).unwrap();
        assert_eq!(p["data"], json!(["a"]));
        let p = page_sorted(list(&["id_2", "id_1", "id_7"]), false, key_of, &Params::parse(Some("before=id_9")), 100, |v| v).unwrap();
        assert_eq!(p["data"], json!(["a"]));
        // A cursor still in the list is its own place; one the list never knew is refused.
        let p = page_sorted(list(&["id_2", "id_1", "id_7"]), false, key_of, &Params::parse(Some("after=id_1")), 100, |v| v).unwrap();
        assert_eq!(p["data"], json!(["d"]));
        let e = page_sorted(list(&["id_2"]), false, key_of, &Params::parse(Some("after=id_5")), 100, |v| v).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
    }
}

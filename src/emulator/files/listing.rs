//! `GET /files/metadata`: filter by MIME types, sort, and page with signed cursors.

use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::Value;

use super::cursor::{self, Position};
use super::store::StoredFile;
use crate::emulator::api_error::ApiError;
use crate::wire::files::FileRecord;
use crate::wire::page::CursorPage;

const MAX_TYPE_FILTERS: usize = 50;
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortField {
    CreatedAt,
    NumBytes,
    Status,
    FileId,
}

impl SortField {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "created_at" => SortField::CreatedAt,
            "num_bytes" => SortField::NumBytes,
            "status" => SortField::Status,
            "file_id" => SortField::FileId,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            SortField::CreatedAt => "created_at",
            SortField::NumBytes => "num_bytes",
            SortField::Status => "status",
            SortField::FileId => "file_id",
        }
    }

    /// The spec's defaults: newest and largest first, statuses in lifecycle order, names A to Z.
    fn default_descending(self) -> bool {
        matches!(self, SortField::CreatedAt | SortField::NumBytes)
    }

    fn key(self, f: &StoredFile) -> Value {
        match self {
            // Registration order is creation order and never ties, unlike clock readings.
            SortField::CreatedAt => Value::from(f.seq),
            SortField::NumBytes => Value::from(f.num_bytes),
            // Every file the emulator lists is Registered, the first lifecycle stage.
            SortField::Status => Value::from(0u64),
            SortField::FileId => Value::from(f.file_id.clone()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Anchor {
    After(Position),
    Before(Position),
}

impl ListParams {
    /// The page size when the request gave none: `Emulator(page_size=...)`, like every list.
    pub fn default_limit(mut self, page_size: usize) -> Self {
        if !self.limit_given {
            self.limit = page_size;
        }
        self
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ListParams {
    types: Vec<String>,
    sort: SortField,
    descending: bool,
    limit: usize,
    /// Whether the request gave `limit` (else the emulator's `page_size` applies).
    limit_given: bool,
    anchor: Option<Anchor>,
}

fn order_name(descending: bool) -> &'static str {
    if descending {
        "desc"
    } else {
        "asc"
    }
}

impl ListParams {
    /// Parses the raw query string. Unknown parameters are ignored; `file_type` may repeat.
    pub fn parse(query: &str, secret: &[u8]) -> Result<Self, ApiError> {
        let mut types = Vec::new();
        let mut sort = None;
        let mut order = None;
        let mut limit = None;
        let mut after = None;
        let mut before = None;
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match name.as_ref() {
                "file_type" => types.extend(
                    value.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_ascii_lowercase),
                ),
                "sort" => sort = Some(value.into_owned()),
                "order" => order = Some(value.into_owned()),
                "limit" => limit = Some(value.into_owned()),
                "after" if !value.is_empty() => after = Some(value.into_owned()),
                "before" if !value.is_empty() => before = Some(value.into_owned()),
                _ => {}
            }
        }
        if types.len() > MAX_TYPE_FILTERS {
            return Err(ApiError::invalid_request(format!(
                "file_type lists {} MIME types; at most {MAX_TYPE_FILTERS} are allowed.",
                types.len()
            )));
        }
        let sort = match sort.as_deref() {
            None | Some("") => SortField::CreatedAt,
            Some(s) => SortField::parse(s).ok_or_else(|| {
                ApiError::invalid_request(format!(
                    "Unknown sort {s:?}: expected created_at, num_bytes, status or file_id."
                ))
            })?,
        };
        let descending = match order.as_deref() {
            None | Some("") => sort.default_descending(),
            Some("asc") => false,
            Some("desc") => true,
            Some(o) => {
                return Err(ApiError::invalid_request(format!(
                    "Unknown order {o:?}: expected asc or desc."
                )))
            }
        };
        let limit_text = limit.clone();
        let limit = match limit.as_deref() {
            None | Some("") => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid_request(format!(
                        "limit must be an integer from 1 to {MAX_LIMIT}, got {l:?}."
                    ))
                })?,
        };
        let anchor = match (after, before) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_request("after and before are mutually exclusive."))
            }
            (Some(c), None) => Some(Anchor::After(cursor::decode(secret, &c)?)),
            (None, Some(c)) => Some(Anchor::Before(cursor::decode(secret, &c)?)),
            (None, None) => None,
        };
        if let Some(Anchor::After(p) | Anchor::Before(p)) = &anchor {
            if p.sort != sort.name() || p.order != order_name(descending) {
                return Err(ApiError::bad_request(
                    "invalid_cursor",
                    format!(
                        "The cursor was issued for sort={} order={}, not sort={} order={}.",
                        p.sort,
                        p.order,
                        sort.name(),
                        order_name(descending)
                    ),
                ));
            }
        }
        let limit_given = !matches!(limit_text.as_deref(), None | Some(""));
        Ok(ListParams { types, sort, descending, limit, limit_given, anchor })
    }

    fn compare_keys(&self, a: &(Value, u64), b: &(Value, u64)) -> Ordering {
        let primary = match (&a.0, &b.0) {
            (Value::String(x), Value::String(y)) => x.cmp(y),
            (x, y) => x.as_u64().unwrap_or(0).cmp(&y.as_u64().unwrap_or(0)),
        };
        let ord = primary.then(a.1.cmp(&b.1));
        if self.descending {
            ord.reverse()
        } else {
            ord
        }
    }

    fn position(&self, f: &StoredFile) -> Position {
        Position {
            sort: self.sort.name().to_string(),
            order: order_name(self.descending).to_string(),
            key: self.sort.key(f),
            seq: f.seq,
        }
    }

    /// One page. `has_more`/`next_cursor` look past the page's end in listing order and
    /// `prev_cursor` before its start, whichever of `after`/`before` was used (the spec does
    /// not say; this keeps both cursors meaningful in both directions).
    pub fn page(&self, files: Vec<Arc<StoredFile>>, secret: &[u8]) -> CursorPage<FileRecord> {
        let mut items: Vec<(Value, u64, Arc<StoredFile>)> = files
            .into_iter()
            .filter(|f| self.types.is_empty() || self.types.iter().any(|t| t.eq_ignore_ascii_case(&f.file_type)))
            .map(|f| (self.sort.key(&f), f.seq, f))
            .collect();
        items.sort_by(|a, b| self.compare_keys(&(a.0.clone(), a.1), &(b.0.clone(), b.1)));
        let key_of = |i: &(Value, u64, Arc<StoredFile>)| (i.0.clone(), i.1);
        let (start, end) = match &self.anchor {
            None => (0, self.limit.min(items.len())),
            Some(Anchor::After(p)) => {
                let anchor = (p.key.clone(), p.seq);
                let start = items.partition_point(|i| self.compare_keys(&key_of(i), &anchor) != Ordering::Greater);
                (start, (start + self.limit).min(items.len()))
            }
            Some(Anchor::Before(p)) => {
                let anchor = (p.key.clone(), p.seq);
                let end = items.partition_point(|i| self.compare_keys(&key_of(i), &anchor) == Ordering::Less);
                (end.saturating_sub(self.limit), end)
            }
        };
        let page = &items[start..end];
        let has_more = end < items.len();
        let next_cursor = match page.last() {
            Some(last) if has_more => Some(cursor::encode(secret, &self.position(&last.2))),
            _ => None,
        };
        let prev_cursor = match page.first() {
            Some(first) if start > 0 => Some(cursor::encode(secret, &self.position(&first.2))),
            _ => None,
        };
        CursorPage {
            data: page.iter().map(|i| i.2.record()).collect(),
            has_more,
            next_cursor,
            prev_cursor,
            offset_style: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::SystemTime;

    const SECRET: [u8; 32] = [1; 32];

    fn file(id: &str, bytes: u64, seq: u64, ty: &str) -> Arc<StoredFile> {
        Arc::new(StoredFile {
            file_id: id.into(),
            file_uid: format!("uid-{seq}"),
            file_type: ty.into(),
            num_bytes: bytes,
            created_at: SystemTime::now(),
            seq,
            path: PathBuf::new(),
        })
    }

    fn files() -> Vec<Arc<StoredFile>> {
        vec![
            file("c.txt", 30, 0, "text/plain"),
            file("a.png", 10, 1, "image/png"),
            file("b.csv", 20, 2, "text/csv"),
            file("d.txt", 40, 3, "text/plain"),
            file("e.json", 50, 4, "application/json"),
        ]
    }

    fn ids(page: &CursorPage<FileRecord>) -> Vec<String> {
        page.data.iter().map(|r| r.file_id.clone()).collect()
    }

    #[test]
    fn default_is_newest_first() {
        let p = ListParams::parse("", &SECRET).unwrap().page(files(), &SECRET);
        assert_eq!(ids(&p), ["e.json", "d.txt", "b.csv", "a.png", "c.txt"]);
        assert!(!p.has_more);
        assert_eq!(p.next_cursor, None);
        assert_eq!(p.prev_cursor, None);
    }

    #[test]
    fn cursors_walk_forward_and_back() {
        let first = ListParams::parse("sort=file_id&limit=2", &SECRET).unwrap().page(files(), &SECRET);
        assert_eq!(ids(&first), ["a.png", "b.csv"]);
        assert!(first.has_more);
        let next = first.next_cursor.clone().unwrap();
        let second = ListParams::parse(&format!("sort=file_id&limit=2&after={next}"), &SECRET)
            .unwrap()
            .page(files(), &SECRET);
        assert_eq!(ids(&second), ["c.txt", "d.txt"]);
        let prev = second.prev_cursor.clone().unwrap();
        let back = ListParams::parse(&format!("sort=file_id&limit=2&before={prev}"), &SECRET)
            .unwrap()
            .page(files(), &SECRET);
        assert_eq!(ids(&back), ["a.png", "b.csv"]);
        assert_eq!(back.prev_cursor, None);
        let last_cursor = second.next_cursor.clone().unwrap();
        let last = ListParams::parse(&format!("sort=file_id&limit=2&after={last_cursor}"), &SECRET)
            .unwrap()
            .page(files(), &SECRET);
        assert_eq!(ids(&last), ["e.json"]);
        assert!(!last.has_more);
        assert_eq!(last.next_cursor, None);
    }

    #[test]
    fn sort_orders_and_type_filter() {
        let by_size = ListParams::parse("sort=num_bytes", &SECRET).unwrap().page(files(), &SECRET);
        assert_eq!(ids(&by_size)[0], "e.json");
        let asc = ListParams::parse("sort=num_bytes&order=asc", &SECRET).unwrap().page(files(), &SECRET);
        assert_eq!(ids(&asc)[0], "a.png");
        let text = ListParams::parse("file_type=text/plain,%20,image/png&sort=file_id", &SECRET)
            .unwrap()
            .page(files(), &SECRET);
        assert_eq!(ids(&text), ["a.png", "c.txt", "d.txt"]);
    }

    #[test]
    fn bad_parameters() {
        let code = |q: &str| ListParams::parse(q, &SECRET).unwrap_err().code;
        assert_eq!(code("sort=size"), "invalid_request");
        assert_eq!(code("order=up"), "invalid_request");
        assert_eq!(code("limit=0"), "invalid_request");
        assert_eq!(code("limit=1001"), "invalid_request");
        assert_eq!(code("limit=ten"), "invalid_request");
        assert_eq!(code("after=nope"), "invalid_cursor");
        assert_eq!(code("after=x&before=y"), "invalid_request");
        let many: Vec<String> = (0..51).map(|i| format!("a/t{i}")).collect();
        assert_eq!(code(&format!("file_type={}", many.join(","))), "invalid_request");
        let c = ListParams::parse("sort=file_id&limit=1", &SECRET).unwrap().page(files(), &SECRET).next_cursor.unwrap();
        assert_eq!(code(&format!("sort=num_bytes&after={c}")), "invalid_cursor");
    }
}

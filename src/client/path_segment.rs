//! Ids placed in URL paths, percent-encoded as exactly one segment.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::error::Error;

/// What stays as it is in a segment: letters, digits and `-._~` (RFC 3986's unreserved set),
/// as Python's `quote(id, safe="")` leaves them in the Python-built paths.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `id` as one path segment, every other byte percent-encoded. Not `url::PathSegmentsMut::push`,
/// which drops ASCII tab, CR and LF (so `"tab\t.txt"` named another file) and takes `.`/`..` as
/// moves; `"."` and `".."` are refused here.
pub fn path_segment(id: &str, argument: &str) -> Result<String, Error> {
    if id.is_empty() || id == "." || id == ".." {
        return Err(Error::invalid_argument(argument, format!("{id:?} is not an id")));
    }
    Ok(utf8_percent_encode(id, ENCODED).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_everything_outside_the_unreserved_set() {
        let seg = |s| path_segment(s, "file_id").unwrap();
        assert_eq!(seg("notes-1_a.b~c.txt"), "notes-1_a.b~c.txt");
        assert_eq!(seg("tab\t.txt"), "tab%09.txt");
        assert_eq!(seg("a\r\nb.txt"), "a%0D%0Ab.txt");
        assert_eq!(seg("50%+off #1?.txt"), "50%25%2Boff%20%231%3F.txt");
        assert_eq!(seg("a/b\\c"), "a%2Fb%5Cc");
        assert_eq!(seg("é"), "%C3%A9");
        assert_eq!(seg("..."), "...");
    }

    #[test]
    fn refuses_what_is_not_a_segment() {
        for bad in ["", ".", ".."] {
            assert!(path_segment(bad, "upload_id").is_err(), "{bad:?}");
        }
    }
}

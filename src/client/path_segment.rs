//! Ids placed in URL paths, percent-encoded as exactly one segment.

use std::fmt::Write;

use super::error::Error;

/// `id` as one path segment: every byte but the unreserved ones (letters, digits, `-._~`)
/// percent-encoded, as Python's `quote(id, safe="")` does for the Python-built paths. Not
/// `url::PathSegmentsMut::push`, which drops ASCII tab, CR and LF (so `"tab\t.txt"` named
/// another file) and takes `.`/`..` as moves; `"."` and `".."` are refused here.
pub fn path_segment(id: &str, argument: &str) -> Result<String, Error> {
    if id.is_empty() || id == "." || id == ".." {
        return Err(Error::invalid_argument(argument, format!("{id:?} is not an id")));
    }
    let mut encoded = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(byte as char);
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    Ok(encoded)
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

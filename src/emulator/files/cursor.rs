//! Opaque listing cursors: the position of one record in one sort order, signed with the
//! emulator's secret so a made-up or edited cursor is answered with 400 `invalid_cursor`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::emulator::api_error::ApiError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Position {
    /// Sort field and order the cursor was made for.
    pub sort: String,
    pub order: String,
    /// The record's sort key and its registration sequence (the tie-break).
    pub key: Value,
    pub seq: u64,
}

fn mac(secret: &[u8], payload: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(secret);
    hasher.update(payload.as_bytes());
    let digest = hasher.finalize();
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn encode(secret: &[u8], position: &Position) -> String {
    let json = serde_json::to_string(position).unwrap_or_default();
    let payload = URL_SAFE_NO_PAD.encode(json.as_bytes());
    let tag = mac(secret, &payload);
    format!("{payload}.{tag}")
}

pub(crate) fn decode(secret: &[u8], cursor: &str) -> Result<Position, ApiError> {
    let invalid = || {
        ApiError::bad_request("invalid_cursor", format!("Cursor {cursor:?} is not valid."))
            .with_suggestion("Use next_cursor or prev_cursor from a previous page as given.")
    };
    let (payload, tag) = cursor.rsplit_once('.').ok_or_else(invalid)?;
    if mac(secret, payload) != tag {
        return Err(invalid());
    }
    let json = URL_SAFE_NO_PAD.decode(payload).map_err(|_| invalid())?;
    serde_json::from_slice(&json).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_forgery() {
        let secret = [7u8; 32];
        let p = Position { sort: "file_id".into(), order: "asc".into(), key: Value::from("a.txt"), seq: 3 };
        let c = encode(&secret, &p);
        assert_eq!(decode(&secret, &c).unwrap(), p);
        assert_eq!(decode(&secret, "made-up").unwrap_err().code, "invalid_cursor");
        assert_eq!(decode(&[8u8; 32], &c).unwrap_err().code, "invalid_cursor");
        let mut edited = c.clone();
        edited.insert(0, 'A');
        assert_eq!(decode(&secret, &edited).unwrap_err().code, "invalid_cursor");
    }
}

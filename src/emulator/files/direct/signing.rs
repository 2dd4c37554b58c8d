//! Part URLs: signed with a per-emulator secret over (upload id, part number, expiry, epoch),
//! so a URL cannot be edited to reach another part or live longer. `expire_all` bumps the
//! epoch: every URL signed before it then reads as expired (not as forged), which is what
//! storage says of an old presigned URL.

use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::Sha256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    Expired,
    BadSignature,
}

pub(crate) struct Signer {
    secret: [u8; 32],
    epoch: AtomicU64,
}

impl Signer {
    pub fn new(secret: [u8; 32]) -> Self {
        Signer { secret, epoch: AtomicU64::new(0) }
    }

    fn mac(&self, epoch: u64, upload_id: &str, part_number: u32, expires: u64) -> String {
        // Any key length is valid for HMAC, so this never falls back in practice.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.secret) else { return String::new() };
        // Newline-separated: an upload id holds no newline, so fields cannot run into each other.
        mac.update(format!("{upload_id}\n{part_number}\n{expires}\n{epoch}").as_bytes());
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Hex signature of a URL valid until `expires` (Unix seconds).
    pub fn sign(&self, upload_id: &str, part_number: u32, expires: u64) -> String {
        self.mac(self.epoch.load(Ordering::SeqCst), upload_id, part_number, expires)
    }

    /// Checks the signature first (so an edited `expires` is a forgery, not an expiry), then
    /// the time. A plain string comparison: timing leaks do not matter in a loopback test double.
    pub fn check(&self, upload_id: &str, part_number: u32, expires: u64, signature: &str, now: u64) -> Result<(), Denied> {
        let current = self.epoch.load(Ordering::SeqCst);
        if self.mac(current, upload_id, part_number, expires) == signature {
            return if now > expires { Err(Denied::Expired) } else { Ok(()) };
        }
        if (0..current).any(|old| self.mac(old, upload_id, part_number, expires) == signature) {
            return Err(Denied::Expired);
        }
        Err(Denied::BadSignature)
    }

    /// Every URL signed so far expires now.
    pub fn expire_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_until_expiry_then_expired() {
        let s = Signer::new([3; 32]);
        let sig = s.sign("upl_1", 2, 1000);
        assert_eq!(s.check("upl_1", 2, 1000, &sig, 999), Ok(()));
        assert_eq!(s.check("upl_1", 2, 1000, &sig, 1000), Ok(()));
        assert_eq!(s.check("upl_1", 2, 1000, &sig, 1001), Err(Denied::Expired));
    }

    #[test]
    fn edits_are_forgeries() {
        let s = Signer::new([3; 32]);
        let sig = s.sign("upl_1", 2, 1000);
        assert_eq!(s.check("upl_1", 3, 1000, &sig, 0), Err(Denied::BadSignature));
        assert_eq!(s.check("upl_2", 2, 1000, &sig, 0), Err(Denied::BadSignature));
        assert_eq!(s.check("upl_1", 2, 9999, &sig, 0), Err(Denied::BadSignature));
        assert_eq!(s.check("upl_1", 2, 1000, "00", 0), Err(Denied::BadSignature));
        let other = Signer::new([4; 32]);
        assert_eq!(other.check("upl_1", 2, 1000, &sig, 0), Err(Denied::BadSignature));
    }

    #[test]
    fn expire_all_expires_earlier_urls_only() {
        let s = Signer::new([3; 32]);
        let old = s.sign("upl_1", 1, 1000);
        s.expire_all();
        assert_eq!(s.check("upl_1", 1, 1000, &old, 0), Err(Denied::Expired));
        let fresh = s.sign("upl_1", 1, 1000);
        assert_eq!(s.check("upl_1", 1, 1000, &fresh, 0), Ok(()));
        s.expire_all();
        assert_eq!(s.check("upl_1", 1, 1000, &fresh, 0), Err(Denied::Expired));
    }
}

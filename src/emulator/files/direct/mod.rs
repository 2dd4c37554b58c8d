//! The direct-to-cloud (multipart) upload: `initiate`, part PUTs to signed URLs that the
//! emulator serves itself under `/_storage`, `parts/checkpoint`, `parts/urls`, `complete` and
//! `abort`. Parts are written at their offsets into one preallocated file per upload, so
//! completing is a rename.
//!
//! Choices where the spec and the wire notes are silent:
//! - a 0-byte file is one empty part (strategy `simple`), so every upload completes the same way;
//! - at most 10,000 parts (the usual object-storage limit): a larger file gets larger parts;
//! - `initiate` without `resume_if_started` next to an unfinished upload of the same name starts
//!   a second upload; the first stays until aborted, and a later resume picks the newest;
//! - unfinished uploads never expire on their own; only their part URLs do;
//! - re-sending a part first forgets its earlier copy (its token and checkpoint): the bytes are
//!   overwritten in place, so the old token no longer describes them;
//! - `checkpoint` answers every part checkpointed so far, not only those of the request;
//! - `checkpoint`, `parts/urls` and `complete` on a completed upload answer 409 `conflict`.

pub(crate) mod layout;
pub(crate) mod registry;
pub(crate) mod routes;
pub(crate) mod signing;
pub(crate) mod storage;

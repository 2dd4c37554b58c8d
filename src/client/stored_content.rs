//! Whether a file stored on the platform holds exactly some local content, compared as both
//! stream (never held whole): how an upload whose answer was lost tells its own landed file from
//! another writer's when its retry meets a 409 for the name.
//!
//! The spec gives no checksum and no way to learn which request created a file, so the bytes
//! are the only sound witness. Equal size is not: two versions of a daily CSV often have it.

use std::path::Path;

use tokio::io::AsyncReadExt;

use super::error::Error;
use super::files::{file_url, next_piece};
use super::transport::{Call, Transport};

/// The local side of a comparison.
#[derive(Debug, Clone, Copy)]
pub enum Local<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
}

/// Reads the local content in the sizes the download delivers.
enum Reader<'a> {
    File(tokio::io::BufReader<tokio::fs::File>, &'a Path),
    Bytes(&'a [u8]),
}

impl Reader<'_> {
    /// Whether the next `chunk.len()` local bytes equal `chunk` (false at a short end).
    async fn next_equals(&mut self, chunk: &[u8], scratch: &mut Vec<u8>) -> Result<bool, Error> {
        match self {
            Reader::Bytes(rest) => {
                if rest.len() < chunk.len() || &rest[..chunk.len()] != chunk {
                    return Ok(false);
                }
                *rest = &rest[chunk.len()..];
                Ok(true)
            }
            Reader::File(file, path) => {
                scratch.resize(chunk.len(), 0);
                match file.read_exact(scratch).await {
                    Ok(_) => Ok(scratch.as_slice() == chunk),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
                    Err(e) => Err(Error::io(path.display(), e)),
                }
            }
        }
    }

    /// Whether the local content ends here.
    async fn at_end(&mut self) -> Result<bool, Error> {
        match self {
            Reader::Bytes(rest) => Ok(rest.is_empty()),
            Reader::File(file, path) => {
                let mut one = [0u8; 1];
                file.read(&mut one).await.map(|n| n == 0).map_err(|e| Error::io(path.display(), e))
            }
        }
    }
}

/// Whether `file_id` on the platform holds exactly `local`. A download that breaks off is
/// retried by the transport's rule; a failure that outlasts it is returned, not guessed at.
pub async fn matches(transport: &Transport, file_id: &str, local: Local<'_>) -> Result<bool, Error> {
    let mut call = Call::get(file_url(transport, "/files/download", file_id)?);
    call.streaming = true;
    let stall = transport.config.timeouts.read;
    transport
        .execute(&call, |response| async move {
            // Each attempt compares from the start.
            let mut reader = match local {
                Local::Bytes(bytes) => Reader::Bytes(bytes),
                Local::File(path) => {
                    let file = tokio::fs::File::open(path).await.map_err(|e| Error::io(path.display(), e))?;
                    Reader::File(tokio::io::BufReader::with_capacity(1 << 20, file), path)
                }
            };
            let mut scratch = Vec::new();
            let mut stream = response.bytes_stream();
            let mut compared: u64 = 0;
            let what = format!("download of {file_id} for comparison");
            while let Some(chunk) = next_piece(&mut stream, stall, &what, compared).await? {
                if !reader.next_equals(&chunk, &mut scratch).await? {
                    return Ok(false);
                }
                compared += chunk.len() as u64;
            }
            reader.at_end().await
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn reader<'a>(local: Local<'a>) -> Reader<'a> {
        match local {
            Local::Bytes(b) => Reader::Bytes(b),
            Local::File(p) => Reader::File(tokio::io::BufReader::new(tokio::fs::File::open(p).await.unwrap()), p),
        }
    }

    #[tokio::test]
    async fn bytes_and_files_compare_chunk_by_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        std::fs::write(&path, b"abcdef").unwrap();
        let mut scratch = Vec::new();
        for local in [Local::Bytes(b"abcdef"), Local::File(&path)] {
            let mut same = reader(local).await;
            assert!(same.next_equals(b"abc", &mut scratch).await.unwrap());
            assert!(same.next_equals(b"def", &mut scratch).await.unwrap());
            assert!(same.at_end().await.unwrap());

            let mut longer_remote = reader(local).await;
            assert!(!longer_remote.next_equals(b"abcdefg", &mut scratch).await.unwrap());

            let mut shorter_remote = reader(local).await;
            assert!(shorter_remote.next_equals(b"abcde", &mut scratch).await.unwrap());
            assert!(!shorter_remote.at_end().await.unwrap());

            let mut other = reader(local).await;
            assert!(!other.next_equals(b"abX", &mut scratch).await.unwrap());
        }
    }
}

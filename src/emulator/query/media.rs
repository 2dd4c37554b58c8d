//! What the stand-in reasoner can "see" of an input: image sizes from headers, text excerpts,
//! JSON top-level keys, and the types it is blind to.

use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::emulator::files::store::StoredFile;

/// Characters of a text file quoted in the answer.
const EXCERPT_CHARS: usize = 200;
/// JSON files larger than this are not parsed for their keys (the stand-in stays cheap).
const JSON_INSPECT_LIMIT: u64 = 16 * 1024 * 1024;
/// Enough of an image's start to reach its size header (JPEG SOF may follow large EXIF data).
const IMAGE_HEADER_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ImageInfo {
    pub mime: Option<String>,
    pub size: Option<(usize, usize)>,
    pub num_bytes: usize,
}

pub(crate) fn image_info(bytes: &[u8], declared_mime: Option<String>) -> ImageInfo {
    let detected = imagesize::image_type(bytes).ok().map(|t| match t {
        imagesize::ImageType::Png => "image/png".to_string(),
        imagesize::ImageType::Jpeg => "image/jpeg".to_string(),
        other => format!("image/{}", format!("{other:?}").to_ascii_lowercase()),
    });
    let size = imagesize::blob_size(bytes).ok().map(|s| (s.width, s.height));
    ImageInfo { mime: declared_mime.or(detected), size, num_bytes: bytes.len() }
}

pub(crate) fn describe_image(info: &ImageInfo) -> String {
    let mime = info.mime.as_deref().unwrap_or("image");
    match info.size {
        Some((w, h)) => format!("{mime} {w}x{h} pixels"),
        None => format!("{mime} of {} bytes whose size could not be read", info.num_bytes),
    }
}

/// One line about parsed JSON: its kind and, for objects, the top-level keys.
pub(crate) fn describe_json(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            if keys.is_empty() {
                "JSON object with no keys".to_string()
            } else {
                format!("JSON object with top-level keys: {}", keys.join(", "))
            }
        }
        Ok(Value::Array(items)) => format!("JSON array of {} items", items.len()),
        Ok(_) => "JSON scalar value".to_string(),
        Err(_) => "text that is not valid JSON".to_string(),
    }
}

/// Whitespace collapsed so the quote is one line and token counting stays meaningful.
pub(crate) fn excerpt(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cut: String = flat.chars().take(EXCERPT_CHARS).collect();
    if flat.chars().count() > EXCERPT_CHARS {
        cut.push_str("...");
    }
    format!("\"{cut}\"")
}

async fn read_prefix(file: &StoredFile, limit: u64) -> std::io::Result<Vec<u8>> {
    let handle = tokio::fs::File::open(&file.path).await?;
    let mut buf = Vec::new();
    handle.take(limit).read_to_end(&mut buf).await?;
    Ok(buf)
}

/// `name (type, N bytes): what the model sees`.
pub(crate) async fn describe_file(file: &StoredFile) -> String {
    let head = format!("{} ({}, {} bytes)", file.file_id, file.file_type, file.num_bytes);
    let ext = file.file_id.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    let seen = match ext.as_str() {
        "txt" => match read_prefix(file, (EXCERPT_CHARS as u64) * 4 + 4).await {
            Ok(bytes) => excerpt(&String::from_utf8_lossy(&bytes)),
            Err(_) => "content unavailable".to_string(),
        },
        "json" if file.num_bytes > JSON_INSPECT_LIMIT => "JSON too large for the emulator to inspect".to_string(),
        "json" => match read_prefix(file, JSON_INSPECT_LIMIT).await {
            Ok(bytes) => describe_json(&String::from_utf8_lossy(&bytes)),
            Err(_) => "content unavailable".to_string(),
        },
        "png" | "jpg" | "jpeg" => match read_prefix(file, IMAGE_HEADER_BYTES).await {
            Ok(bytes) => format!("image {}", describe_image(&image_info(&bytes, None))),
            Err(_) => "content unavailable".to_string(),
        },
        // The spec: csv contents are accepted but invisible to reasoning models.
        "csv" => "contents not visible to this model".to_string(),
        "mp4" => "video: this model does not describe video".to_string(),
        _ => "unsupported type".to_string(),
    };
    format!("{head}: {seen}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal PNG header: signature, IHDR length/type, width and height.
    pub(crate) fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut v = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R'];
        v.extend(w.to_be_bytes());
        v.extend(h.to_be_bytes());
        v.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        v
    }

    #[test]
    fn image_sizes_from_headers() {
        let info = image_info(&png_header(640, 480), None);
        assert_eq!(info.size, Some((640, 480)));
        assert_eq!(describe_image(&info), "image/png 640x480 pixels");
        assert!(describe_image(&image_info(b"garbage", None)).contains("could not be read"));
    }

    #[test]
    fn json_and_text() {
        assert_eq!(describe_json("{\"b\": 1, \"a\": 2}"), "JSON object with top-level keys: b, a");
        assert_eq!(describe_json("[1,2]"), "JSON array of 2 items");
        assert_eq!(excerpt("a\n  b"), "\"a b\"");
        assert!(excerpt(&"x".repeat(300)).ends_with("...\""));
    }
}

//! What a call's result becomes for the model: its text, and the images a provider
//! takes.

use serde_json::Value;

use infra::provider::Picture;

/// The base64 bytes of images one call's result may send the model (providers refuse
/// images over about 5 MB); images past it stay in the call's record only.
pub(super) const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// The most images one call's result sends the model.
pub(super) const MAX_IMAGES: usize = 4;

/// An image content piece (`image/png`, `image/jpeg`, `image/gif`, `image/webp`: what
/// the providers take) as an image for the model.
pub(super) fn picture(item: &Value) -> Option<Picture> {
    if item.get("type")?.as_str()? != "image" {
        return None;
    }
    let media_type = item.get("mimeType")?.as_str()?;
    // Each kind a provider takes, by how its base64 begins (its file signature).
    let signature = match media_type {
        "image/png" => "iVBORw0KGgo",
        "image/jpeg" => "/9j/",
        "image/gif" => "R0lGOD",
        "image/webp" => "UklGR",
        _ => return None,
    };
    let data = item.get("data")?.as_str()?;
    // Data a provider would refuse (not base64, or not the kind it says) would fail
    // every later request of the agent.
    (is_base64(data) && data.starts_with(signature))
        .then(|| Picture { media_type: media_type.to_owned(), data: data.to_owned() })
}

/// Whether `text` is standard base64 (with its padding), and not empty.
fn is_base64(text: &str) -> bool {
    let body = text.trim_end_matches('=');
    !text.is_empty()
        && text.len().is_multiple_of(4)
        && text.len() - body.len() <= 2
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// One piece of a result's content as text.
pub(super) fn content_text(item: &Value) -> String {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    let str_of = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => str_of("text").to_owned(),
        "image" | "audio" => format!(
            "[{kind} content, {}, {} bytes of base64; the whole result is in this call's record]",
            str_of("mimeType"),
            str_of("data").len()
        ),
        "resource" => {
            let resource = item.get("resource").cloned().unwrap_or(Value::Null);
            let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("<resource uri=\"{uri}\">\n{text}\n</resource>"),
                None => format!("[resource {uri}: binary, in this call's record]"),
            }
        }
        "resource_link" => format!("[resource link: {} {}]", str_of("uri"), str_of("name")).trim_end().to_owned(),
        other => format!("[content of type `{other}`: in this call's record]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_real_base64_images_of_known_kinds_go_to_the_model() {
        let image = |mime: &str, data: &str| json!({"type": "image", "mimeType": mime, "data": data});
        assert!(picture(&image("image/png", "iVBORw0KGgo=")).is_some());
        assert!(picture(&image("image/png", "!!!! not base64 <script>")).is_none());
        assert!(picture(&image("image/png", "abc")).is_none());
        assert!(picture(&image("image/png", "")).is_none());
        assert!(picture(&image("image/svg+xml", "iVBORw0KGgo=")).is_none());
        // Base64 of text called a PNG, or a JPEG called a PNG.
        assert!(picture(&image("image/png", "bm90IGEgcG5nIGF0IGFsbA==")).is_none());
        assert!(picture(&image("image/png", "/9j/4AAQSkZJRg==")).is_none());
        assert!(picture(&image("image/jpeg", "/9j/4AAQSkZJRg==")).is_some());
        assert!(picture(&json!({"type": "text", "text": "iVBORw0KGgo="})).is_none());
    }
}

//! The presentation content of a result: what the model sees.

use serde::{Deserialize, Serialize};

/// One block of presentation content.
///
/// ```
/// use dsh_core::ContentBlock;
/// let block = ContentBlock::text("hello");
/// assert_eq!(block.as_text(), Some("hello"));
/// assert_eq!(serde_json::to_string(&block).unwrap(), r#"{"type":"text","text":"hello"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// For example `image/png`.
        media_type: String,
        /// Base64 data.
        data: String,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text { text: text.into() }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
            ContentBlock::Image { .. } => None,
        }
    }

    /// Bytes this block holds (text or base64 data).
    pub fn len_bytes(&self) -> usize {
        match self {
            ContentBlock::Text { text } => text.len(),
            ContentBlock::Image { media_type, data } => media_type.len() + data.len(),
        }
    }
}

/// The text of all text blocks, joined by newlines: the form chat formats without blocks show.
///
/// ```
/// use dsh_core::{content::joined_text, ContentBlock};
/// assert_eq!(joined_text(&[ContentBlock::text("a"), ContentBlock::text("b")]), "a\nb");
/// ```
pub fn joined_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for (i, text) in blocks.iter().filter_map(ContentBlock::as_text).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(text);
    }
    out
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn truncate_at_char_boundary(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

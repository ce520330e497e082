//! Deterministic bounding of everything that crosses from a kernel to an agent: text, JSON
//! payloads of displays and results, tracebacks and images. Each function reports whether it
//! cut anything, so results carry per-field truncation flags.

use serde_json::{Map, Value};

/// Mime types returned as MCP image content (base64 payloads).
pub const BINARY_IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// SVG travels as text but is an image: kept whole or dropped (by UTF-8 bytes), never cut.
pub const SVG_TYPE: &str = "image/svg+xml";

/// Images the server downscales when they are over the image bound.
const FITTED_IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg"];

/// Largest PNG/JPEG (decoded bytes) kept for downscaling; larger ones are omitted with a note.
pub const MAX_FIT_INPUT_BYTES: usize = 32 * 1024 * 1024;

/// Oversized images (decoded bytes) one execution keeps for downscaling, so a cell showing many
/// huge pictures cannot pin unbounded memory; past it they are omitted with a note.
pub(crate) const MAX_FIT_PENDING_BYTES: usize = 64 * 1024 * 1024;

/// Limits for one JSON payload.
#[derive(Debug, Clone, Copy)]
pub struct JsonLimits {
    pub max_depth: usize,
    pub max_items: usize,
    pub max_chars: usize,
}

/// At most `max` characters of a message, keeping its start (what failed) and its end (an
/// installer's reason comes last), joined by `…`.
pub fn bound_message(text: &str, max: usize) -> String {
    let n_chars = text.chars().count();
    if n_chars <= max {
        return text.to_owned();
    }
    let keep = max.saturating_sub(1);
    let head = keep / 3;
    let tail = keep - head;
    let head_text = ipython_mcp_text::cut(text, head).kept;
    let tail_text = ipython_mcp_text::cut_front(text, tail).kept;
    format!("{head_text}…{tail_text}")
}

/// Removes ANSI escape sequences (colours, cursor moves) from kernel text.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(character) = chars.next() {
        if character != '\u{1b}' {
            out.push(character);
            continue;
        }
        match chars.peek() {
            // CSI: ESC [ parameters... final byte in @..~
            Some('[') => {
                chars.next();
                for next in chars.by_ref() {
                    if ('@'..='~').contains(&next) {
                        break;
                    }
                }
            }
            // OSC: ESC ] ... BEL or ESC \
            Some(']') => {
                chars.next();
                while let Some(next) = chars.next() {
                    if next == '\u{7}' || (next == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

/// Joins traceback entries, strips ANSI and bounds the result to `max` characters.
///
/// When it must cut, it keeps the start and the end: the last lines name the exception,
/// which matters most to whoever reads it.
pub fn bound_traceback(entries: &[String], max: usize) -> (String, bool) {
    let text = strip_ansi(&entries.join("\n"));
    let total = text.chars().count();
    if total <= max {
        return (text, false);
    }
    let marker_reserve = 64.min(max);
    let keep = max - marker_reserve;
    let head_chars = keep / 3;
    let tail_chars = keep - head_chars;
    let omitted = total - head_chars - tail_chars;
    let head = ipython_mcp_text::cut(&text, head_chars).kept;
    let tail = ipython_mcp_text::cut_front(&text, tail_chars).kept;
    let mut marker = format!("\n... {omitted} characters of traceback omitted ...\n");
    ipython_mcp_text::truncate(&mut marker, marker_reserve);
    (format!("{head}{marker}{tail}"), true)
}

/// Bounds a JSON value: strings to `max_chars`, arrays and objects to `max_items` entries,
/// nesting to `max_depth` (deeper values become the string `"…"`). Object keys keep their order.
pub fn bound_json(value: &mut Value, limits: JsonLimits) -> bool {
    bound_at(value, limits, 0)
}

fn bound_at(value: &mut Value, limits: JsonLimits, depth: usize) -> bool {
    match value {
        Value::String(text) => ipython_mcp_text::truncate(text, limits.max_chars) > 0,
        Value::Array(_) | Value::Object(_) if depth >= limits.max_depth => {
            *value = Value::String("…".to_owned());
            true
        }
        Value::Array(items) => {
            let mut cut = items.len() > limits.max_items;
            items.truncate(limits.max_items);
            for item in items.iter_mut() {
                cut |= bound_at(item, limits, depth + 1);
            }
            cut
        }
        Value::Object(map) => {
            let mut cut = map.len() > limits.max_items;
            if cut {
                let kept: Map<String, Value> = std::mem::take(map)
                    .into_iter()
                    .take(limits.max_items)
                    .collect();
                *map = kept;
            }
            for item in map.values_mut() {
                cut |= bound_at(item, limits, depth + 1);
            }
            cut
        }
        _ => false,
    }
}

/// Decoded size of a base64 payload, without decoding it.
pub fn base64_decoded_len(text: &str) -> usize {
    let trimmed = text.trim_end_matches(['=', '\n']);
    let significant = trimmed
        .bytes()
        .filter(|byte| !byte.is_ascii_whitespace())
        .count();
    significant * 3 / 4
}

/// Bounds one mime bundle in place: images over `max_image_bytes` are removed (and recorded
/// in `metadata["ipython_mcp"]["omitted_images"]`), other entries are JSON-bounded; images
/// (SVG included) are never cut, since half an image is not an image. A PNG or JPEG over the
/// bound stays as it is, to be downscaled when the execution ends (`payload::settle`), while it
/// fits in `fit_room` (decoded bytes, decreased by what it keeps) and in the largest image
/// decoded at all.
pub fn bound_bundle(
    data: &mut Map<String, Value>,
    metadata: &mut Map<String, Value>,
    limits: JsonLimits,
    max_image_bytes: usize,
    fit_room: &mut usize,
) -> bool {
    let mut cut = false;
    let mut omitted_images = Map::new();
    let keys: Vec<String> = data.keys().cloned().collect();
    for key in keys {
        let is_svg = key == SVG_TYPE;
        if is_svg || BINARY_IMAGE_TYPES.contains(&key.as_str()) {
            let size = data.get(&key).and_then(Value::as_str).map(|text| {
                if is_svg {
                    text.len()
                } else {
                    base64_decoded_len(text)
                }
            });
            match size {
                Some(size) if size <= max_image_bytes => {}
                Some(size)
                    if FITTED_IMAGE_TYPES.contains(&key.as_str())
                        && size <= MAX_FIT_INPUT_BYTES.min(*fit_room) =>
                {
                    *fit_room -= size;
                }
                Some(size) => {
                    data.remove(&key);
                    omitted_images.insert(key, Value::from(size));
                    cut = true;
                }
                None => {
                    data.remove(&key);
                    cut = true;
                }
            }
        } else if let Some(value) = data.get_mut(&key) {
            cut |= bound_json(value, limits);
        }
    }
    let mut metadata_value = Value::Object(std::mem::take(metadata));
    cut |= bound_json(&mut metadata_value, limits);
    if let Value::Object(map) = metadata_value {
        *metadata = map;
    }
    if !omitted_images.is_empty() {
        let note = metadata
            .entry("ipython_mcp")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(note) = note {
            let images = note
                .entry("omitted_images")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(images) = images {
                images.extend(omitted_images);
            }
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: JsonLimits = JsonLimits {
        max_depth: 3,
        max_items: 2,
        max_chars: 4,
    };

    fn check_json(input: Value, expect: Value, expect_cut: bool) {
        let mut value = input;
        let cut = bound_json(&mut value, LIMITS);
        assert_eq!((value, cut), (expect, expect_cut));
    }

    #[test]
    fn json_is_bounded_in_depth_items_and_chars() {
        check_json(json!("abcdef"), json!("abcd"), true);
        check_json(json!([1, 2, 3]), json!([1, 2]), true);
        check_json(
            json!({"a": 1, "b": 2, "c": 3}),
            json!({"a": 1, "b": 2}),
            true,
        );
        check_json(json!([[[[1]]]]), json!([[["…"]]]), true);
        check_json(json!({"a": [1, "xy"]}), json!({"a": [1, "xy"]}), false);
    }

    #[test]
    fn ansi_is_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[0;31mValueError\u{1b}[0m: bad"),
            "ValueError: bad"
        );
        assert_eq!(
            strip_ansi("a\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\b"),
            "alinkb"
        );
        assert_eq!(strip_ansi("plain ✓"), "plain ✓");
    }

    #[test]
    fn traceback_keeps_both_ends() {
        let entries: Vec<String> = (0..200).map(|i| format!("frame {i:03}")).collect();
        let (text, cut) = bound_traceback(&entries, 300);
        assert!(cut);
        assert!(text.chars().count() <= 300, "{}", text.chars().count());
        assert!(text.starts_with("frame 000"));
        assert!(text.ends_with("frame 199"));
        assert!(text.contains("characters of traceback omitted"));
        let (short, cut) = bound_traceback(&["a".into(), "\u{1b}[31mb\u{1b}[0m".into()], 300);
        assert_eq!((short.as_str(), cut), ("a\nb", false));
    }

    #[test]
    fn large_images_are_removed_with_a_note() {
        let mut data = json!({"image/gif": "A".repeat(400), "text/plain": "<Figure>"})
            .as_object()
            .cloned()
            .unwrap();
        let mut metadata = Map::new();
        let mut room = usize::MAX;
        assert!(bound_bundle(
            &mut data,
            &mut metadata,
            JsonLimits {
                max_depth: 6,
                max_items: 100,
                max_chars: 100
            },
            100,
            &mut room,
        ));
        assert_eq!(Value::Object(data), json!({"text/plain": "<Figure>"}));
        assert_eq!(
            Value::Object(metadata),
            json!({"ipython_mcp": {"omitted_images": {"image/gif": 300}}})
        );
    }

    #[test]
    fn large_png_and_jpeg_stay_for_downscaling_while_there_is_room() {
        let limits = JsonLimits {
            max_depth: 6,
            max_items: 100,
            max_chars: 100,
        };
        let bundle = json!({"image/png": "A".repeat(400), "image/jpeg": "B".repeat(400)});
        let mut data = bundle.as_object().cloned().unwrap();
        let mut room = 500;
        assert!(bound_bundle(
            &mut data,
            &mut Map::new(),
            limits,
            100,
            &mut room
        ));
        // The JPEG (300 decoded bytes, first in key order) took the room; the PNG did not fit
        // in what was left.
        assert_eq!(room, 200);
        assert!(data.contains_key("image/jpeg"));
        assert!(!data.contains_key("image/png"));
        let mut data = bundle.as_object().cloned().unwrap();
        let mut room = usize::MAX;
        assert!(!bound_bundle(
            &mut data,
            &mut Map::new(),
            limits,
            100,
            &mut room
        ));
        assert_eq!(Value::Object(data), bundle);
    }

    #[test]
    fn svg_is_kept_whole_or_dropped() {
        let limits = JsonLimits {
            max_depth: 6,
            max_items: 100,
            max_chars: 10,
        };
        let svg = format!("<svg>{}</svg>", "x".repeat(50));
        let mut data = json!({"image/svg+xml": svg.clone()})
            .as_object()
            .cloned()
            .unwrap();
        let mut room = usize::MAX;
        assert!(!bound_bundle(
            &mut data,
            &mut Map::new(),
            limits,
            100,
            &mut room
        ));
        assert_eq!(data["image/svg+xml"], Value::String(svg));
        let mut metadata = Map::new();
        assert!(bound_bundle(
            &mut data,
            &mut metadata,
            limits,
            20,
            &mut room
        ));
        assert!(data.is_empty());
        assert_eq!(
            Value::Object(metadata),
            json!({"ipython_mcp": {"omitted_images": {"image/svg+xml": 61}}})
        );
    }

    #[test]
    fn base64_length_is_exact() {
        assert_eq!(base64_decoded_len("aGVsbG8="), 5);
        assert_eq!(base64_decoded_len("aGVsbG8h"), 6);
        assert_eq!(base64_decoded_len("aGVs\nbG8h\n"), 6);
    }

    #[test]
    fn bound_message_keeps_start_and_end() {
        assert_eq!(bound_message("short", 10), "short");
        let long = format!("install failed: {}the reason", "x".repeat(100));
        let bounded = bound_message(&long, 31);
        assert_eq!(bounded.chars().count(), 31);
        assert!(bounded.starts_with("install fa"), "{bounded}");
        assert!(bounded.ends_with("xxxthe reason"), "{bounded}");
        assert!(bounded.contains('…'));
    }
}

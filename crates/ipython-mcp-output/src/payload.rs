//! The large payloads of a finished execution, made fit for one reply: oversized PNG and JPEG
//! images are downscaled (originals kept in the spool), and displays past the reply's byte
//! budget are withheld — written to the spool and listed, never silently dropped.
//!
//! The collector keeps oversized PNG/JPEG images as they came (up to [`MAX_FIT_INPUT_BYTES`]
//! each and `bound::MAX_FIT_PENDING_BYTES` per execution); `settle` does the decoding,
//! resizing and file writing, so it runs on a blocking thread once the execution is over. A snapshot of a
//! running execution uses `settle_live` instead: no pixels, no files, the oversized images
//! and payloads past the budget only counted.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::bound::{base64_decoded_len, BINARY_IMAGE_TYPES, SVG_TYPE};
use crate::output::{DisplayItem, Withheld};
use crate::raster::{self, JPEG, PNG};

/// The largest image `settle` is given to fit (`bound` holds images to it); the kernel's
/// helper is told it too, so it sends the server every image that can still be made to fit.
pub use crate::bound::MAX_FIT_INPUT_BYTES;

/// Entries smaller than this (serialized) are never withheld: a note would cost as much.
const MIN_WITHHELD_BYTES: usize = 1024;

/// Where a finished execution's spool files go: `<dir>/<msg_id>.<name>`.
pub struct SpoolFiles {
    pub dir: PathBuf,
    pub msg_id: String,
    written: usize,
}

impl SpoolFiles {
    /// The files of execution `msg_id` in the spool directory `dir`.
    pub fn new(dir: &Path, msg_id: &str) -> Self {
        SpoolFiles {
            dir: dir.to_owned(),
            msg_id: msg_id.to_owned(),
            written: 0,
        }
    }

    /// Writes `bytes` as a new 0600 file named `<msg_id>.<stem>-N.<extension>`; its path.
    fn write(&mut self, stem: &str, extension: &str, bytes: &[u8]) -> Option<String> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        self.written += 1;
        let path = self.dir.join(format!(
            "{}.{stem}-{}.{extension}",
            self.msg_id, self.written
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(bytes));
        match written {
            Ok(()) => Some(path.display().to_string()),
            Err(error) => {
                tracing::warn!(%error, "a display payload could not be spooled");
                None
            }
        }
    }
}

/// The bounds `settle` applies.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub max_image_bytes: usize,
    pub max_reply_bytes: usize,
}

/// What `settle` changed.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    pub displays_cut: bool,
    pub result_cut: bool,
    pub withheld: Vec<Withheld>,
}

/// Downscales the oversized images of a finished execution and withholds what exceeds the
/// reply budget (blocking: decodes, encodes and writes files). `result_metadata` receives the
/// notes about the result's images.
pub(crate) fn settle(
    displays: &mut [DisplayItem],
    result: Option<&mut Map<String, Value>>,
    result_metadata: &mut Map<String, Value>,
    budget: Budget,
    mut spool: Option<&mut SpoolFiles>,
) -> Settled {
    let mut settled = Settled::default();
    let mut result = result;
    if let Some(result) = result.as_deref_mut() {
        settled.result_cut |= fit_images(result, result_metadata, budget, spool.as_deref_mut());
    }
    for item in displays.iter_mut() {
        settled.displays_cut |= fit_images(
            &mut item.data,
            &mut item.metadata,
            budget,
            spool.as_deref_mut(),
        );
    }
    if let Some(result) = result.as_deref_mut() {
        summarize(result, result_metadata, spool.as_deref_mut());
    }
    for item in displays.iter_mut() {
        summarize(&item.data, &mut item.metadata, spool.as_deref_mut());
    }
    withhold(displays, result, budget, spool, &mut settled);
    settled
}

/// Notes in `metadata` (`ipython_mcp.summary`: `text`, `mime`, `path`) a summary of a bundle a
/// model can neither read nor see (see `rich`), and writes the payload it describes to the
/// spool, whole, so the summary can say where it is.
fn summarize(
    bundle: &Map<String, Value>,
    metadata: &mut Map<String, Value>,
    spool: Option<&mut SpoolFiles>,
) {
    if !crate::rich::needs_summary(bundle) {
        return;
    }
    let (Some(text), Some(mime)) = (
        crate::rich::summarize(bundle),
        crate::rich::summarized_mime(bundle),
    ) else {
        return;
    };
    let path = match (spool, bundle.get(mime)) {
        (Some(spool), Some(value)) => {
            let (_, extension, payload) = file_form(mime, value.clone());
            spool.write("display", extension, &payload)
        }
        _ => None,
    };
    let note = ours(metadata, "summary");
    note.insert("text".into(), text.into());
    note.insert("mime".into(), mime.into());
    if let Some(path) = path {
        note.insert("path".into(), path.into());
    }
}

/// A running execution's displays as a reply may show them: oversized images omitted (they
/// are downscaled when it finishes) and payloads past the budget left out, without a path.
pub(crate) fn settle_live(displays: &mut [DisplayItem], budget: Budget) -> Settled {
    let mut settled = Settled::default();
    for item in displays.iter_mut() {
        settled.displays_cut |= omit_oversized(&mut item.data, &mut item.metadata, budget);
    }
    withhold(displays, None, budget, None, &mut settled);
    settled
}

/// Fits each oversized PNG/JPEG of one bundle; the original goes to the spool. An image that
/// cannot be decoded (or fitted) is omitted with the reason. True when anything was omitted.
fn fit_images(
    data: &mut Map<String, Value>,
    metadata: &mut Map<String, Value>,
    budget: Budget,
    mut spool: Option<&mut SpoolFiles>,
) -> bool {
    let mut omitted = false;
    for mime in [PNG, JPEG] {
        let Some(Value::String(text)) = data.get(mime) else {
            continue;
        };
        if base64_decoded_len(text) <= budget.max_image_bytes {
            continue;
        }
        let Some(Value::String(text)) = data.remove(mime) else {
            continue;
        };
        let compact: String = text.split_whitespace().collect();
        let raw = match base64::engine::general_purpose::STANDARD.decode(compact.as_bytes()) {
            Ok(raw) => raw,
            Err(error) => {
                note_omitted(
                    metadata,
                    mime,
                    base64_decoded_len(&text),
                    &format!("not valid base64: {error}"),
                );
                omitted = true;
                continue;
            }
        };
        // A PNG becomes a JPEG only where the bundle has no JPEG of its own.
        let jpeg_allowed = mime == PNG && !data.contains_key(JPEG);
        // A decoder bug must cost this image, not the execution.
        let fitted = std::panic::catch_unwind(|| {
            raster::fit(&raw, mime, budget.max_image_bytes, jpeg_allowed)
        })
        .unwrap_or_else(|_| {
            Err(raster::FitError::Undecodable {
                mime: mime.to_owned(),
                reason: "the decoder failed".to_owned(),
            })
        });
        match fitted {
            Ok(fitted) => {
                let extension = if mime == PNG { "png" } else { "jpg" };
                let original_path = spool
                    .as_deref_mut()
                    .and_then(|spool| spool.write("image", extension, &raw));
                data.insert(
                    fitted.mime.to_owned(),
                    Value::String(base64::engine::general_purpose::STANDARD.encode(&fitted.bytes)),
                );
                // The shown size travels in the standard per-mime metadata, as IPython's Image
                // puts it.
                let per_mime = metadata
                    .entry(fitted.mime)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(per_mime) = per_mime {
                    per_mime.insert("width".into(), fitted.size.0.into());
                    per_mime.insert("height".into(), fitted.size.1.into());
                }
                let mut note = Map::new();
                note.insert(
                    "original_size".into(),
                    serde_json::json!([fitted.original_size.0, fitted.original_size.1]),
                );
                note.insert("original_bytes".into(), raw.len().into());
                note.insert(
                    "size".into(),
                    serde_json::json!([fitted.size.0, fitted.size.1]),
                );
                note.insert("bytes".into(), fitted.bytes.len().into());
                if fitted.mime != mime {
                    note.insert("mime".into(), fitted.mime.into());
                }
                if let Some(path) = original_path {
                    note.insert("original_path".into(), path.into());
                }
                ours(metadata, "downscaled_images").insert(mime.to_owned(), Value::Object(note));
            }
            Err(error) => {
                note_omitted(metadata, mime, raw.len(), &error.to_string());
                omitted = true;
            }
        }
    }
    omitted
}

/// Removes images over the bound from a bundle, noting their sizes (no decoding).
fn omit_oversized(
    data: &mut Map<String, Value>,
    metadata: &mut Map<String, Value>,
    budget: Budget,
) -> bool {
    let mut omitted = false;
    for mime in [PNG, JPEG] {
        let size = match data.get(mime) {
            Some(Value::String(text)) => base64_decoded_len(text),
            _ => continue,
        };
        if size > budget.max_image_bytes {
            data.remove(mime);
            ours(metadata, "omitted_images").insert(mime.to_owned(), size.into());
            omitted = true;
        }
    }
    omitted
}

/// Keeps displays (the result first: the agent asked for it) in the reply while their
/// payloads fit `max_reply_bytes` together; each larger payload after that is withheld.
fn withhold(
    displays: &mut [DisplayItem],
    result: Option<&mut Map<String, Value>>,
    budget: Budget,
    mut spool: Option<&mut SpoolFiles>,
    settled: &mut Settled,
) {
    let mut spent = 0usize;
    let mut bundles: Vec<(Option<usize>, &mut Map<String, Value>)> = Vec::new();
    if let Some(result) = result {
        bundles.push((None, result));
    }
    for (index, item) in displays.iter_mut().enumerate() {
        bundles.push((Some(index), &mut item.data));
    }
    for (display, bundle) in bundles {
        let mimes: Vec<String> = bundle.keys().cloned().collect();
        for mime in mimes {
            let size = bundle.get(&mime).map_or(0, |value| {
                serde_json::to_vec(value).map_or(0, |json| json.len())
            });
            if size < MIN_WITHHELD_BYTES || spent + size <= budget.max_reply_bytes {
                spent += size;
                continue;
            }
            let Some(value) = bundle.remove(&mime) else {
                continue;
            };
            let (bytes, extension, payload) = file_form(&mime, value);
            let path = spool
                .as_deref_mut()
                .and_then(|spool| spool.write("display", extension, &payload));
            settled.withheld.push(Withheld {
                display,
                mime,
                bytes: bytes as u64,
                path,
            });
            match display {
                Some(_) => settled.displays_cut = true,
                None => settled.result_cut = true,
            }
        }
    }
}

/// A payload as a file: decoded bytes for base64 images, the text for text, JSON otherwise;
/// with its size and a file extension.
fn file_form(mime: &str, value: Value) -> (usize, &'static str, Vec<u8>) {
    let extension = match mime {
        PNG => "png",
        JPEG => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        SVG_TYPE => "svg",
        "text/html" => "html",
        "text/markdown" => "md",
        "text/latex" => "tex",
        "application/javascript" => "js",
        _ if mime.ends_with("json") => "json",
        _ => "txt",
    };
    let payload = match value {
        Value::String(text) if BINARY_IMAGE_TYPES.contains(&mime) => {
            let compact: String = text.split_whitespace().collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact.as_bytes())
                .unwrap_or_else(|_| text.into_bytes())
        }
        Value::String(text) => text.into_bytes(),
        other => serde_json::to_vec(&other).unwrap_or_default(),
    };
    (payload.len(), extension, payload)
}

fn note_omitted(metadata: &mut Map<String, Value>, mime: &str, bytes: usize, reason: &str) {
    ours(metadata, "omitted_images").insert(mime.to_owned(), bytes.into());
    ours(metadata, "image_errors").insert(mime.to_owned(), reason.into());
}

/// `metadata["ipython_mcp"][key]`, created as an object when missing.
fn ours<'a>(metadata: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    object_at(object_at(metadata, "ipython_mcp"), key)
}

/// `map[key]` as an object, made one when missing or of another type.
fn object_at<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let value = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().expect("an object: made one above")
}

//! Short summaries, for a model, of displays it can neither read nor see: a bundle whose only
//! forms are HTML, JSON or JavaScript (Plotly, Vega-Lite, Bokeh, ipywidgets, a DataFrame's HTML
//! table). The summary says what the display is (kind, title, axes and series, or columns,
//! shape and first rows) in at most [`MAX_SUMMARY_CHARS`]; the full payload goes to the spool.
//!
//! Written by hand (ARCHITECTURE.md, "Written by hand"): what is read of HTML is the cell text
//! of table rows and a heading, which a tag scanner does in a page of code; an HTML5 parser
//! would double the crate's build for it.

use serde_json::{Map, Value};

/// Longest summary, in characters.
pub const MAX_SUMMARY_CHARS: usize = 400;

/// HTML read for a summary; rows past it are estimated from the `<tr>` count of the whole.
const MAX_SCANNED_HTML_BYTES: usize = 1 << 20;

/// Characters of one table cell a summary shows.
const MAX_CELL_CHARS: usize = 40;

/// Data rows a table summary shows.
const SHOWN_ROWS: usize = 3;

const PLOTLY: &str = "application/vnd.plotly.v1+json";
const WIDGET: &str = "application/vnd.jupyter.widget-view+json";
const BOKEH: &str = "application/vnd.bokehjs_exec.v0+json";

/// The text a model can read in a bundle: its `text/plain`, unless that is only an object's
/// default repr (`<IPython.core.display.HTML object>`), else its Markdown or LaTeX.
pub fn readable_text(bundle: &Map<String, Value>) -> Option<&str> {
    let plain = bundle
        .get("text/plain")
        .and_then(Value::as_str)
        .filter(|text| !is_default_repr(text));
    plain.or_else(|| {
        ["text/markdown", "text/latex"]
            .iter()
            .find_map(|mime| bundle.get(*mime).and_then(Value::as_str))
    })
}

/// Whether a model needs a summary of a bundle: it has no image, and either a chart or widget
/// form (whose `text/plain`, when there is one, is a placeholder or a dump of the spec) or no
/// readable text beside a form a summary can describe.
pub fn needs_summary(bundle: &Map<String, Value>) -> bool {
    let has_image = bundle.keys().any(|mime| mime.starts_with("image/"));
    let chart = bundle
        .keys()
        .any(|mime| [PLOTLY, WIDGET, BOKEH].contains(&mime.as_str()) || is_vega(mime));
    !has_image && (chart || readable_text(bundle).is_none()) && summarized_mime(bundle).is_some()
}

/// The form a summary describes (and the spool keeps): the richest one present.
pub fn summarized_mime(bundle: &Map<String, Value>) -> Option<&str> {
    let rank = |mime: &str| match mime {
        PLOTLY => Some(0),
        _ if is_vega(mime) => Some(1),
        WIDGET => Some(2),
        BOKEH => Some(3),
        "text/html" => Some(4),
        "application/javascript" => Some(6),
        _ if mime.ends_with("json") => Some(5),
        _ => None,
    };
    bundle
        .keys()
        .filter_map(|mime| rank(mime).map(|rank| (rank, mime.as_str())))
        .min()
        .map(|(_, mime)| mime)
}

/// A summary of `bundle` for a model, if it has a form one describes.
pub fn summarize(bundle: &Map<String, Value>) -> Option<String> {
    let mime = summarized_mime(bundle)?;
    let value = bundle.get(mime)?;
    let text = match mime {
        PLOTLY => plotly(value),
        _ if is_vega(mime) => vega(mime, value),
        WIDGET => format!(
            "ipywidgets widget (model {}): interactive, shown only in a notebook front end; read its state (.value) in the kernel",
            value
                .get("model_id")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
        ),
        BOKEH => "Bokeh plot: interactive JavaScript with no image form; export it with bokeh.io.export_png to see it".to_owned(),
        "text/html" => html(value.as_str().unwrap_or_default()),
        "application/javascript" => format!(
            "JavaScript ({} characters) that runs only in a browser",
            value.as_str().map_or(0, |text| text.chars().count())
        ),
        _ => json(mime, value),
    };
    // `shorten` adds its ellipsis after the characters it keeps.
    Some(ipython_mcp_text::shorten(&text, MAX_SUMMARY_CHARS - 1))
}

fn is_vega(mime: &str) -> bool {
    (mime.starts_with("application/vnd.vegalite.v") || mime.starts_with("application/vnd.vega.v"))
        && mime.ends_with("+json")
}

fn is_default_repr(text: &str) -> bool {
    let text = text.trim();
    text.starts_with('<') && text.ends_with('>') && text.contains(" object")
}

/// A title as Plotly and Vega spell it: a string, or an object with `text`.
fn title_of(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Object(object) => object
            .get("text")
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_owned),
        Value::Array(lines) => Some(
            lines
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

fn plotly(figure: &Value) -> String {
    let layout = figure.get("layout");
    let mut text = String::from("Plotly figure");
    if let Some(title) = title_of(layout.and_then(|layout| layout.get("title"))) {
        text.push_str(&format!(" {title:?}"));
    }
    let traces = figure
        .get("data")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    text.push_str(&format!(
        ": {} trace{}",
        traces.len(),
        if traces.len() == 1 { "" } else { "s" }
    ));
    let described: Vec<String> = traces
        .iter()
        .take(4)
        .map(|trace| {
            let kind = trace
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("scatter");
            let points = ["x", "y", "values", "z"]
                .iter()
                .find_map(|key| trace.get(*key).and_then(Value::as_array))
                .map(Vec::len);
            let mut part = kind.to_owned();
            if let Some(name) = trace.get("name").and_then(Value::as_str) {
                part.push_str(&format!(" {name:?}"));
            }
            if let Some(points) = points {
                part.push_str(&format!(" ({points} points)"));
            }
            part
        })
        .collect();
    if !described.is_empty() {
        text.push_str(&format!(" ({})", described.join(", ")));
    }
    for axis in ["xaxis", "yaxis"] {
        if let Some(title) = title_of(
            layout
                .and_then(|layout| layout.get(axis))
                .and_then(|axis| axis.get("title")),
        ) {
            text.push_str(&format!("; {}: {title:?}", &axis[..1]));
        }
    }
    text
}

fn vega(mime: &str, spec: &Value) -> String {
    let mut text = String::from(if mime.contains("vegalite") {
        "Vega-Lite chart"
    } else {
        "Vega chart"
    });
    if let Some(title) = title_of(spec.get("title")) {
        text.push_str(&format!(" {title:?}"));
    }
    let mark = match spec.get("mark") {
        Some(Value::String(mark)) => Some(mark.clone()),
        Some(Value::Object(mark)) => mark.get("type").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let layers = ["layer", "concat", "hconcat", "vconcat", "facet"]
        .iter()
        .find_map(|key| {
            spec.get(*key)
                .and_then(Value::as_array)
                .map(|views| (*key, views.len()))
        });
    match (mark, layers) {
        (Some(mark), _) => text.push_str(&format!(": mark {mark}")),
        (None, Some((kind, count))) => text.push_str(&format!(": {count} views ({kind})")),
        (None, None) => text.push(':'),
    }
    if let Some(encoding) = spec.get("encoding").and_then(Value::as_object) {
        let channels: Vec<String> = encoding
            .iter()
            .filter(|(channel, _)| {
                ["x", "y", "color", "size", "theta", "column", "row"].contains(&channel.as_str())
            })
            .map(|(channel, definition)| {
                let field = definition
                    .get("field")
                    .and_then(Value::as_str)
                    .or_else(|| definition.get("aggregate").and_then(Value::as_str))
                    .unwrap_or("?");
                match definition.get("type").and_then(Value::as_str) {
                    Some(kind) => format!("{channel}: {field} ({kind})"),
                    None => format!("{channel}: {field}"),
                }
            })
            .collect();
        if !channels.is_empty() {
            text.push_str(&format!("; {}", channels.join(", ")));
        }
    }
    let rows = match spec.get("data") {
        Some(Value::Object(data)) => data.get("values").and_then(Value::as_array).map(Vec::len),
        // Vega: a list of named datasets.
        Some(Value::Array(sets)) => Some(
            sets.iter()
                .filter_map(|set| set.get("values").and_then(Value::as_array))
                .map(Vec::len)
                .sum(),
        ),
        _ => None,
    };
    if let Some(rows) = rows {
        text.push_str(&format!("; {rows} data rows"));
    }
    text
}

fn json(mime: &str, value: &Value) -> String {
    match value {
        Value::Object(object) => {
            let keys: Vec<&str> = object.keys().take(8).map(String::as_str).collect();
            format!(
                "{mime}: an object with {} keys: {}{}",
                object.len(),
                keys.join(", "),
                if object.len() > keys.len() {
                    ", …"
                } else {
                    ""
                }
            )
        }
        Value::Array(items) => format!("{mime}: an array of {} items", items.len()),
        other => format!(
            "{mime}: {}",
            ipython_mcp_text::shorten(&other.to_string(), 200)
        ),
    }
}

/// An HTML table's shape, columns and first rows; other HTML, its heading and first text.
fn html(source: &str) -> String {
    let chars = source.chars().count();
    let scanned = &source[..floor_boundary(source, MAX_SCANNED_HTML_BYTES)];
    let scan = scan(scanned);
    if scan.rows.is_empty() {
        let mut text = format!("HTML ({chars} characters)");
        if let Some(heading) = &scan.heading {
            text.push_str(&format!(" {heading:?}"));
        }
        let body = scan.text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !body.is_empty() {
            text.push_str(&format!(": {}", ipython_mcp_text::shorten(&body, 240)));
        }
        return text;
    }
    let header_rows = scan.rows.iter().take_while(|row| row.header).count().max(
        // A table without <thead> whose first row is all <th> has that row as its header.
        usize::from(scan.rows[0].all_th),
    );
    // The last header row names the columns (pandas leaves the index's name empty).
    let columns: Vec<&str> = scan
        .rows
        .get(header_rows.saturating_sub(1))
        .filter(|_| header_rows > 0)
        .map(|row| {
            row.cells
                .iter()
                .map(String::as_str)
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default();
    // Rows past the scanned part are counted, not read.
    let unscanned_rows = source[scanned.len()..].matches("<tr").count();
    let data_rows = scan.rows.len() - header_rows + unscanned_rows;
    let width = scan
        .rows
        .iter()
        .map(|row| row.cells.len())
        .max()
        .unwrap_or(0);
    let mut text = format!("HTML table: {data_rows} rows × {width} columns");
    if let Some(shape) = &scan.shape_note {
        text.push_str(&format!(" (it says {shape:?})"));
    }
    if !columns.is_empty() {
        text.push_str(&format!("; columns: {}", columns.join(", ")));
    }
    let shown: Vec<String> = scan.rows[header_rows..]
        .iter()
        .take(SHOWN_ROWS)
        .map(|row| {
            row.cells
                .iter()
                .map(|cell| ipython_mcp_text::shorten(cell, MAX_CELL_CHARS))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect();
    if !shown.is_empty() {
        text.push_str(&format!("; first rows: {}", shown.join("; ")));
    }
    text
}

/// What `scan` reads of HTML.
#[derive(Debug, Default)]
struct Scan {
    rows: Vec<Row>,
    heading: Option<String>,
    /// Visible text outside tables (bounded).
    text: String,
    /// pandas' `<p>N rows × M columns</p>` under a shortened frame.
    shape_note: Option<String>,
}

#[derive(Debug, Default)]
struct Row {
    cells: Vec<String>,
    /// In `<thead>`.
    header: bool,
    all_th: bool,
}

/// Reads table rows (cell text, at most the first rows' worth kept), the first heading and the
/// visible text of HTML with a tag scanner: no DOM, scripts and styles skipped.
fn scan(source: &str) -> Scan {
    const MAX_TEXT: usize = 2_000;
    let mut scan = Scan::default();
    let mut rest = source;
    let mut in_head = false;
    let mut cell: Option<String> = None;
    let mut heading: Option<String> = None;
    let mut paragraph: Option<String> = None;
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        if let Some(cell) = cell.as_mut() {
            push_text(cell, text, 200);
        } else {
            if let Some(heading) = heading.as_mut() {
                push_text(heading, text, 200);
            }
            if let Some(paragraph) = paragraph.as_mut() {
                push_text(paragraph, text, 100);
            }
            if scan.rows.is_empty() {
                push_text(&mut scan.text, text, MAX_TEXT);
            }
        }
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        let tag = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        match (name.as_str(), closing) {
            ("script" | "style", false) => {
                rest = skip_to_end_tag(rest, &name);
            }
            ("thead", opening) => in_head = !opening,
            ("tr", false) => {
                if let Some(done) = cell.take() {
                    last_row(&mut scan).cells.push(done);
                }
                scan.rows.push(Row {
                    header: in_head,
                    all_th: true,
                    ..Row::default()
                });
            }
            ("td" | "th", false) => {
                if let Some(done) = cell.take() {
                    last_row(&mut scan).cells.push(done);
                }
                if name == "td" {
                    last_row(&mut scan).all_th = false;
                }
                // Only the first rows' cells are read; the rest are counted.
                if scan.rows.len() <= SHOWN_ROWS + 2 {
                    cell = Some(String::new());
                }
            }
            ("td" | "th", true) => {
                if let Some(done) = cell.take() {
                    last_row(&mut scan).cells.push(done);
                }
            }
            ("h1" | "h2" | "h3" | "title", false) if scan.heading.is_none() => {
                heading = Some(String::new());
            }
            ("h1" | "h2" | "h3" | "title", true) => {
                if let Some(done) = heading.take() {
                    scan.heading = Some(done.trim().to_owned()).filter(|text| !text.is_empty());
                }
            }
            ("p", false) => paragraph = Some(String::new()),
            ("p", true) => {
                if let Some(done) = paragraph.take() {
                    let done = done.split_whitespace().collect::<Vec<_>>().join(" ");
                    if done.contains(" rows × ") && done.contains(" columns") {
                        scan.shape_note = Some(done);
                    }
                }
            }
            _ => {}
        }
    }
    for row in &mut scan.rows {
        for cell in &mut row.cells {
            *cell = cell.split_whitespace().collect::<Vec<_>>().join(" ");
        }
        row.all_th &= !row.cells.is_empty();
    }
    scan
}

/// `rest` from the tag that ends the element `name` (case-insensitive), or empty.
fn skip_to_end_tag<'a>(rest: &'a str, name: &str) -> &'a str {
    let mut from = 0;
    while let Some(index) = rest[from..].find("</") {
        let start = from + index;
        let candidate = rest.as_bytes().get(start + 2..start + 2 + name.len());
        if candidate.is_some_and(|bytes| bytes.eq_ignore_ascii_case(name.as_bytes())) {
            return &rest[start..];
        }
        from = start + 2;
    }
    ""
}

fn last_row(scan: &mut Scan) -> &mut Row {
    if scan.rows.is_empty() {
        scan.rows.push(Row::default());
    }
    scan.rows.last_mut().expect("a row was just ensured")
}

/// Appends HTML text with its common entities decoded, up to `max` characters in all.
fn push_text(into: &mut String, text: &str, max: usize) {
    if into.chars().count() >= max || text.is_empty() {
        return;
    }
    let decoded = text
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    into.push_str(&decoded);
    into.push(' ');
}

/// The largest char boundary of `text` at or before `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    (0..=index)
        .rev()
        .find(|index| text.is_char_boundary(*index))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn summary(bundle: Value) -> String {
        let bundle = bundle.as_object().expect("object").clone();
        assert!(needs_summary(&bundle), "{bundle:?}");
        summarize(&bundle).expect("a summary")
    }

    #[test]
    fn a_dataframe_table_gives_its_shape_columns_and_first_rows() {
        let html = r#"<div><style scoped>.dataframe tbody tr th { vertical-align: top; }</style>
<table border="1" class="dataframe"><thead><tr style="text-align: right;"><th></th><th>city</th><th>sales</th></tr></thead>
<tbody><tr><th>0</th><td>Paris</td><td>1</td></tr><tr><th>1</th><td>Lyon &amp; Co</td><td>2</td></tr>
<tr><th>2</th><td>Nice</td><td>3</td></tr><tr><th>3</th><td>Metz</td><td>4</td></tr><tr><th>4</th><td>Brest</td><td>5</td></tr>
<tr><th>5</th><td>Caen</td><td>6</td></tr></tbody></table><p>6 rows × 2 columns</p></div>"#;
        assert_eq!(
            summary(json!({"text/html": html, "text/plain": "<pandas.io.formats.style.Styler object at 0x7f>"})),
            "HTML table: 6 rows × 3 columns (it says \"6 rows × 2 columns\"); columns: city, sales; first rows: 0 | Paris | 1; 1 | Lyon & Co | 2; 2 | Nice | 3"
        );
    }

    #[test]
    fn plotly_and_vega_lite_give_title_series_and_axes() {
        assert_eq!(
            summary(json!({"application/vnd.plotly.v1+json": {
                "data": [{"type": "scatter", "name": "temp", "x": [1, 2, 3], "y": [4, 5, 6]}, {"type": "bar", "y": [1, 2]}],
                "layout": {"title": {"text": "Weather"}, "xaxis": {"title": {"text": "day"}}, "yaxis": {"title": "°C"}},
            }})),
            "Plotly figure \"Weather\": 2 traces (scatter \"temp\" (3 points), bar (2 points)); x: \"day\"; y: \"°C\""
        );
        assert_eq!(
            summary(json!({"application/vnd.vegalite.v5+json": {
                "title": "Sales", "mark": {"type": "bar"},
                "encoding": {"x": {"field": "a", "type": "nominal"}, "y": {"field": "b", "type": "quantitative"}},
                "data": {"values": [{"a": "x", "b": 1}, {"a": "y", "b": 2}]},
            }, "text/plain": "<VegaLite 5 object>\n\nIf you see this message, it means the renderer has not been properly enabled"})),
            "Vega-Lite chart \"Sales\": mark bar; x: a (nominal), y: b (quantitative); 2 data rows"
        );
    }

    #[test]
    fn widgets_bokeh_json_and_plain_html_are_named() {
        assert!(summary(json!({"application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2}, "text/plain": "IntSlider(value=0)"})).starts_with("ipywidgets widget (model abc)"));
        assert!(summary(
            json!({"application/vnd.bokehjs_exec.v0+json": "", "application/javascript": "x"})
        )
        .starts_with("Bokeh plot"));
        assert_eq!(
            summary(json!({"application/json": {"a": 1, "b": [1, 2]}})),
            "application/json: an object with 2 keys: a, b"
        );
        assert_eq!(
            summary(
                json!({"text/html": "<h2>Report</h2><script>var x = '<td>';</script><p>All   good &lt;3</p>"})
            ),
            "HTML (70 characters) \"Report\": Report All good <3"
        );
    }

    #[test]
    fn readable_bundles_need_no_summary_and_summaries_are_bounded() {
        for bundle in [
            json!({"text/plain": "   a  b\n0  1  2", "text/html": "<table></table>"}),
            json!({"image/png": "iVBOR", "text/html": "<img>"}),
            json!({"text/markdown": "# Title", "text/plain": "<IPython.core.display.Markdown object>"}),
            json!({"text/plain": "just text"}),
        ] {
            assert!(
                !needs_summary(bundle.as_object().expect("object")),
                "{bundle}"
            );
        }
        let rows: String = (0..5_000)
            .map(|row| format!("<tr><td>{}</td></tr>", "x".repeat(300 + row % 7)))
            .collect();
        let text = summary(json!({"text/html": format!("<table>{rows}</table>")}));
        assert!(text.chars().count() <= MAX_SUMMARY_CHARS, "{text}");
        assert!(
            text.starts_with("HTML table: 5000 rows × 1 columns"),
            "{text}"
        );
    }
}

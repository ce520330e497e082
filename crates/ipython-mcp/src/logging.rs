//! Logs go to stderr only: in stdio mode stdout is the MCP stream.
//!
//! Logs are metadata only at every level, whatever `IPYTHON_MCP_LOG` asks for. Our own events
//! never carry code, arguments or values; rmcp's do at `debug` and `trace` (the whole request,
//! result or notification: code, arguments, outputs, tracebacks, configured variable values),
//! so those events of rmcp's are dropped here, before any filter the user set can let them
//! through.

use tracing::Metadata;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// Fields in which rmcp logs a protocol message or an error payload (`Debug` of the whole
/// JSON-RPC message, its params, its result, or the error data sent back).
const PAYLOAD_FIELDS: [&str; 5] = ["request", "result", "notification", "evt", "error"];

pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|error| {
        eprintln!(
            "ipython-mcp: ignoring invalid {} ({error}); using info",
            ipython_mcp_config::LOG.env
        );
        EnvFilter::new("info")
    });
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_filter(filter)
        .with_filter(filter_fn(is_metadata_only));
    tracing_subscriber::registry().with(layer).init();
}

/// False for an event of rmcp's that dumps a message: any at `trace` (each event and each
/// message sent over HTTP), and any with a payload field at the other levels.
fn is_metadata_only(metadata: &Metadata<'_>) -> bool {
    let target = metadata.target();
    if target != "rmcp" && !target.starts_with("rmcp::") {
        return true;
    }
    if *metadata.level() == tracing::Level::TRACE {
        return false;
    }
    !metadata
        .fields()
        .iter()
        .any(|field| PAYLOAD_FIELDS.contains(&field.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmcp's own event at `level` with these fields, seen through the filter.
    fn rmcp_event_kept(level: tracing::Level, fields: &'static [&'static str]) -> bool {
        use tracing::callsite::{Callsite, Identifier};
        struct Site;
        impl Callsite for Site {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!("not registered")
            }
        }
        static SITE: Site = Site;
        let metadata = Metadata::new(
            "event",
            "rmcp::service",
            level,
            None,
            None,
            None,
            tracing::field::FieldSet::new(fields, Identifier(&SITE)),
            tracing::metadata::Kind::EVENT,
        );
        is_metadata_only(&metadata)
    }

    #[test]
    fn rmcp_message_dumps_are_dropped_at_every_level_and_metadata_is_kept() {
        use tracing::Level;
        assert!(!rmcp_event_kept(
            Level::DEBUG,
            &["message", "id", "request"]
        ));
        assert!(!rmcp_event_kept(Level::DEBUG, &["message", "id", "result"]));
        assert!(!rmcp_event_kept(Level::WARN, &["message", "id", "error"]));
        assert!(!rmcp_event_kept(Level::INFO, &["message", "notification"]));
        assert!(!rmcp_event_kept(Level::TRACE, &["message"]));
        assert!(rmcp_event_kept(Level::INFO, &["message", "id", "reason"]));
        assert!(rmcp_event_kept(Level::INFO, &["message", "peer_info"]));
    }
}

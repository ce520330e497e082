//! Every connected client that can be told the tool list changed, in both protocol families.
//!
//! rmcp delivers `notifications/tools/list_changed` two ways: a
//! handshake-era client (up to 2025-11-25) through its `Peer`, kept from `on_initialized`; a
//! 2026-07-28 client only through the `SubscriptionSink` of its open `subscriptions/listen`
//! request. rmcp keeps neither across connections, so the server keeps them here, shared by every
//! handler instance (one per stdio connection or HTTP session).

use std::sync::{Arc, Mutex};

use rmcp::service::{Peer, SubscriptionSink};
use rmcp::RoleServer;

/// The clients to notify, shared by all handler instances.
#[derive(Clone, Default)]
pub struct Peers {
    inner: Arc<Mutex<Lists>>,
}

#[derive(Default)]
struct Lists {
    legacy: Vec<Peer<RoleServer>>,
    sinks: Vec<SubscriptionSink>,
}

impl Peers {
    /// Remembers a handshake-era client (called from `on_initialized`).
    pub fn add_legacy(&self, peer: Peer<RoleServer>) {
        let mut lists = self.lock();
        lists.legacy.retain(|peer| !peer.is_transport_closed());
        lists.legacy.push(peer);
    }

    /// Remembers an open `subscriptions/listen` stream until [`Peers::remove_sink`].
    pub fn add_sink(&self, sink: SubscriptionSink) {
        self.lock().sinks.push(sink);
    }

    pub fn remove_sink(&self, sink: &SubscriptionSink) {
        self.lock().sinks.retain(|kept| kept.id() != sink.id());
    }

    /// How many clients would be notified now (closed transports excluded).
    pub fn len(&self) -> usize {
        let lists = self.lock();
        lists
            .legacy
            .iter()
            .filter(|peer| !peer.is_transport_closed())
            .count()
            + lists.sinks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends `notifications/tools/list_changed` to every client. A client that has gone away
    /// is dropped from the list; the others are still notified.
    pub async fn notify_tool_list_changed(&self) {
        let (legacy, sinks) = {
            let mut lists = self.lock();
            lists.legacy.retain(|peer| !peer.is_transport_closed());
            (lists.legacy.clone(), lists.sinks.clone())
        };
        for peer in legacy {
            if let Err(error) = peer.notify_tool_list_changed().await {
                tracing::debug!(%error, "tools/list_changed not delivered to a client");
            }
        }
        for sink in sinks {
            if let Err(error) = sink.notify_tool_list_changed().await {
                tracing::debug!(%error, "tools/list_changed not delivered to a subscription");
                self.remove_sink(&sink);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lists> {
        // A panic while holding this lock cannot leave the lists inconsistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

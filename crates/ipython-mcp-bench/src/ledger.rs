//! Counting replies where they arrive: a client transport that notes every JSON-RPC request
//! it sends and every response it receives, by request id. The rmcp client drops a response
//! whose id it no longer waits for, so a duplicated reply is visible only here, below it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

/// How many responses each request got.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    answers: HashMap<RequestId, u32>,
    /// Responses to ids never sent (or errors without an id).
    unsolicited: usize,
    /// Requests the client cancelled: the server may answer them once, or not at all.
    cancelled: std::collections::HashSet<RequestId>,
}

/// A ledger's verdict, summed over clients.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replies {
    pub(crate) requests: usize,
    /// Requests without a response.
    pub(crate) lost: usize,
    /// Responses beyond the first to a request, and responses to no request.
    pub(crate) duplicated: usize,
}

impl Ledger {
    pub(crate) fn sent(&mut self, id: RequestId) {
        self.answers.entry(id).or_insert(0);
    }

    pub(crate) fn answered(&mut self, id: Option<&RequestId>) {
        match id.and_then(|id| self.answers.get_mut(id)) {
            Some(count) => *count += 1,
            None => self.unsolicited += 1,
        }
    }

    /// The client sent `notifications/cancelled` for `id`: no answer is then not a loss.
    pub(crate) fn cancelled(&mut self, id: RequestId) {
        self.cancelled.insert(id);
    }

    /// Read once every call has returned: a request still unanswered then is lost.
    pub(crate) fn replies(&self) -> Replies {
        Replies {
            requests: self.answers.len(),
            lost: self
                .answers
                .iter()
                .filter(|(id, count)| **count == 0 && !self.cancelled.contains(*id))
                .count(),
            duplicated: self.unsolicited
                + self
                    .answers
                    .values()
                    .map(|count| count.saturating_sub(1) as usize)
                    .sum::<usize>(),
        }
    }
}

impl std::ops::AddAssign for Replies {
    fn add_assign(&mut self, other: Replies) {
        self.requests += other.requests;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
    }
}

/// `inner`, with every request and response noted in `ledger`.
pub(crate) struct Counted<T> {
    pub(crate) inner: T,
    pub(crate) ledger: Arc<Mutex<Ledger>>,
}

fn note(ledger: &Mutex<Ledger>, write: impl FnOnce(&mut Ledger)) {
    // A poisoned ledger only means another client task panicked; its counts are still whole.
    write(
        &mut ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Counted<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Noted before it leaves, so that its response always finds it.
        match &item {
            JsonRpcMessage::Request(request) => {
                note(&self.ledger, |ledger| ledger.sent(request.id.clone()))
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                {
                    if let Some(id) = cancelled.params.request_id.clone() {
                        note(&self.ledger, |ledger| ledger.cancelled(id));
                    }
                }
            }
            _ => {}
        }
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let ledger = Arc::clone(&self.ledger);
        let next = self.inner.receive();
        async move {
            let message = next.await;
            match &message {
                Some(JsonRpcMessage::Response(response)) => {
                    note(&ledger, |ledger| ledger.answered(Some(&response.id)))
                }
                Some(JsonRpcMessage::Error(error)) => {
                    note(&ledger, |ledger| ledger.answered(error.id.as_ref()))
                }
                _ => {}
            }
            message
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn id(number: i64) -> RequestId {
        NumberOrString::Number(number)
    }

    #[test]
    fn each_request_is_answered_once_or_counted_lost_or_duplicated() {
        let mut ledger = Ledger::default();
        for number in 0..4 {
            ledger.sent(id(number));
        }
        ledger.answered(Some(&id(0)));
        ledger.answered(Some(&id(1)));
        ledger.answered(Some(&id(1)));
        ledger.answered(Some(&id(1)));
        ledger.answered(Some(&id(3)));
        ledger.answered(Some(&id(9)));
        // A cancelled request may go unanswered: 4 is not lost.
        ledger.sent(id(4));
        ledger.cancelled(id(4));
        ledger.answered(None);
        assert_eq!(
            ledger.replies(),
            Replies {
                requests: 5,
                lost: 1,
                duplicated: 4
            }
        );
        let mut total = Replies::default();
        total += ledger.replies();
        total += Ledger::default().replies();
        assert_eq!(total, ledger.replies());
    }
}

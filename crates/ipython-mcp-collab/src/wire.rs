//! The room's messages on the WebSocket: y-sync (0) and awareness (1) through yrs's `sync`
//! module, and jupyter_server_ydoc's own RAW (2) JSON notices, read by their `type` only.
//!
//! The tag is read here, not by yrs's `Message::decode`: yrs reads tag 2 as y-websocket's
//! auth message, which jupyter_server_ydoc uses for RAW instead.

use yrs::encoding::read::{Cursor, Read as _};
use yrs::sync::{AwarenessUpdate, Message, SyncMessage};
use yrs::updates::decoder::{Decode as _, DecoderV1};
use yrs::updates::encoder::Encode as _;
use yrs::StateVector;

const SYNC: u8 = 0;
const AWARENESS: u8 = 1;
/// jupyter_server_ydoc's `MessageType.RAW`: a JSON string (`{"type": "conflict"}`, a save's
/// answer).
const RAW: u8 = 2;

/// A message from the room.
#[derive(Debug)]
pub(crate) enum Incoming {
    Sync(SyncMessage),
    Awareness(AwarenessUpdate),
    /// A RAW notice and its `type`, if it has one.
    Raw(Option<String>),
    /// A tag this client does not know: ignored.
    Unknown(u8),
}

/// Reads one message (the room sends one per WebSocket frame).
pub(crate) fn decode(bytes: &[u8]) -> Result<Incoming, String> {
    let mut decoder = DecoderV1::new(Cursor::new(bytes));
    let tag: u8 = decoder.read_var().map_err(|error| error.to_string())?;
    match tag {
        SYNC => SyncMessage::decode(&mut decoder)
            .map(Incoming::Sync)
            .map_err(|error| format!("unreadable sync message: {error}")),
        AWARENESS => {
            let data = decoder.read_buf().map_err(|error| error.to_string())?;
            AwarenessUpdate::decode_v1(data)
                .map(Incoming::Awareness)
                .map_err(|error| format!("unreadable awareness message: {error}"))
        }
        RAW => {
            let text = decoder.read_string().map_err(|error| error.to_string())?;
            let kind = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|notice| notice.get("type")?.as_str().map(str::to_owned));
            Ok(Incoming::Raw(kind))
        }
        other => Ok(Incoming::Unknown(other)),
    }
}

pub(crate) fn sync_step1(state: StateVector) -> Vec<u8> {
    Message::Sync(SyncMessage::SyncStep1(state)).encode_v1()
}

pub(crate) fn sync_step2(update: Vec<u8>) -> Vec<u8> {
    Message::Sync(SyncMessage::SyncStep2(update)).encode_v1()
}

pub(crate) fn update(update: Vec<u8>) -> Vec<u8> {
    Message::Sync(SyncMessage::Update(update)).encode_v1()
}

pub(crate) fn awareness(update: AwarenessUpdate) -> Vec<u8> {
    Message::Awareness(update).encode_v1()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_unknown_tags_are_ignored() {
        let message = update(vec![1, 2, 3]);
        assert!(matches!(
            decode(&message),
            Ok(Incoming::Sync(SyncMessage::Update(bytes))) if bytes == [1, 2, 3]
        ));
        assert!(matches!(
            decode(&sync_step1(StateVector::default())),
            Ok(Incoming::Sync(SyncMessage::SyncStep1(_)))
        ));
        // RAW: tag, then a length-prefixed JSON string.
        let notice = br#"{"type":"conflict"}"#;
        let mut raw = vec![RAW, notice.len() as u8];
        raw.extend_from_slice(notice);
        assert!(matches!(decode(&raw), Ok(Incoming::Raw(Some(kind))) if kind == "conflict"));
        assert!(matches!(decode(&[9, 0]), Ok(Incoming::Unknown(9))));
        assert!(decode(&[]).is_err());
    }
}

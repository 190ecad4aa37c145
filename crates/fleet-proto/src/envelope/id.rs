//! Which request id a message answers at: the key, or `ce_id`, which must
//! agree. Apart from the other headers because it decides where even a
//! refused message's answer goes ([`readable_id`]).

use super::Rejection;
use crate::{ErrorCode, RequestId};

/// Where an answer about this message can go, if anywhere: the request id
/// [`Envelope::parse`](super::Envelope::parse) would answer at, also for a
/// message it refuses.
pub fn readable_id(key: Option<&[u8]>, ce_id: Option<&[u8]>) -> Option<RequestId> {
    match resolve_id(key, ce_id) {
        Ok(id) => Some(id),
        Err(rejection) => rejection.id,
    }
}

/// The key is the request id (it picks the partition); `ce_id` must agree.
pub(super) fn resolve_id(key: Option<&[u8]>, ce_id: Option<&[u8]>) -> Result<RequestId, Rejection> {
    let from_key = key.map(RequestId::from_bytes);
    let from_header = ce_id.map(RequestId::from_bytes);
    match (from_key, from_header) {
        (Some(Ok(k)), Some(Ok(c))) if k != c => {
            Err(Rejection::new(Some(&k), ErrorCode::BadRequest, format!("message key {k:?} differs from ce_id {c:?}")))
        }
        (Some(Ok(k)), _) => Ok(k),
        (_, Some(Ok(c))) => Ok(c),
        (Some(Err(e)), _) | (None, Some(Err(e))) => Err(Rejection::new(None, ErrorCode::BadRequest, e.to_string())),
        (None, None) => Err(Rejection::new(None, ErrorCode::BadRequest, "neither a message key nor a ce_id header")),
    }
}

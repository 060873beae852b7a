//! Error paths of the verbs: remote access violations (RemAccessErr, memory untouched, the
//! QP flushed, other QPs unaffected), local protection and length errors, requests that
//! `ibv_post_send` refuses at once, receive-side errors, and a server that loses power
//! while requests are outstanding (RetryExcErr after the ACK timeout, no hang).

#[path = "../common/mod.rs"]
mod common;

mod crash_timeouts;
mod failure_order;
mod local_errors;
mod receive_errors;
mod remote_access;
mod teardown;

use common::*;
use remora_model::time::Instant;
use remora_verbs::*;

pub(crate) const PERSIST: FlushPlacement = FlushPlacement::Persistence;
pub(crate) const VISIBLE: FlushPlacement = FlushPlacement::Visibility;

pub(crate) fn statuses(wcs: &[(WorkCompletion, Instant)]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|(wc, _)| (wc.wr_id, wc.status)).collect()
}

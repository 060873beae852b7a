//! RDMA operation ordering and completion semantics (seed 000 §2 "RDMA Operation
//! Ordering", §3.1.3, and the iWARP paragraph of §3.2), observed through the simulator:
//! completions and their times at the client, what a CPU load on the server sees and when,
//! the server's crash image, and the requester RNIC's transmit events.

#[path = "../common/mod.rs"]
mod common;

mod completions;
mod fences;
mod non_posted_order;
mod posted_order;
mod properties;
mod receive_queue;

use common::*;
use remora_model::rnic::{EventKind, NodeEvent};
use remora_model::time::Instant;
use remora_verbs::*;

pub(crate) const PERSIST: FlushPlacement = FlushPlacement::Persistence;
pub(crate) const VISIBLE: FlushPlacement = FlushPlacement::Visibility;

pub(crate) fn ids(wcs: &[(WorkCompletion, Instant)]) -> Vec<u64> {
    wcs.iter().map(|(wc, _)| wc.wr_id).collect()
}

pub(crate) fn all_ok(wcs: &[(WorkCompletion, Instant)]) {
    for (wc, t) in wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?} at {t}");
    }
}

pub(crate) fn time_of(wcs: &[(WorkCompletion, Instant)], id: u64) -> Instant {
    wcs.iter()
        .find(|(wc, _)| wc.wr_id == id)
        .unwrap_or_else(|| panic!("no completion for wr {id} in {wcs:?}"))
        .1
}

pub(crate) fn transmitted(events: &[NodeEvent], id: u64) -> Instant {
    events
        .iter()
        .find(|e| e.kind == EventKind::Transmitted && e.id == id)
        .unwrap_or_else(|| panic!("wr {id} was never transmitted"))
        .at
}

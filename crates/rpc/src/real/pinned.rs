//! PM at fixed addresses: every connection's redo log, then the one object store, at the
//! same place in every life of the server (allocated through a
//! [`PinnedNode`](remora_soft::pinned::PinnedNode)).

use crate::api::RpcError;
use crate::durable::DurableOptions;
use crate::kv::KvLayout;

/// PM bytes a durable-RPC server with `opts` needs for `connections` connections: one log
/// each, then the store, each 4096-aligned (the order [`serve_durable`](super::serve_durable) lays them out in).
pub fn pm_bytes_needed(opts: &DurableOptions, connections: u32) -> Result<u64, RpcError> {
    Ok(log_stride(opts)? * connections as u64 + store_bytes(opts))
}

/// Bytes between two connections' logs: one log, 4096-aligned.
pub(super) fn log_stride(opts: &DurableOptions) -> Result<u64, RpcError> {
    Ok(opts.log_layout(0)?.bytes().next_multiple_of(4096))
}

fn store_bytes(opts: &DurableOptions) -> u64 {
    KvLayout {
        base: 0,
        objects: opts.objects,
        max_value: opts.max_value as u64,
    }
    .bytes()
}

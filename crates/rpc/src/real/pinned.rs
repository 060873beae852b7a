//! PM at fixed addresses: every connection's redo log, then the one object store, at the
//! same place in every life of the server (allocated through a
//! [`PinnedNode`](remora_soft::pinned::PinnedNode)).

use crate::api::RpcError;
use crate::durable::DurableOptions;
use crate::kv::KvLayout;

/// PM bytes a durable-RPC server with `opts` needs for `connections` connections: one log
/// each, then the store, each 4096-aligned (the order [`serve_durable`](super::serve_durable) lays them out in).
pub fn pm_bytes_needed(opts: &DurableOptions, connections: u32) -> Result<u64, RpcError> {
    let store = store_bytes(opts)?;
    log_stride(opts)?
        .checked_mul(connections as u64)
        .and_then(|logs| logs.checked_add(store))
        .ok_or_else(|| {
            RpcError::Malformed(format!(
                "server options: {connections} redo logs and a store of {store} bytes exceed \
                 the address space"
            ))
        })
}

/// Bytes between two connections' logs: one log, 4096-aligned.
pub(super) fn log_stride(opts: &DurableOptions) -> Result<u64, RpcError> {
    Ok(opts.log_layout(0)?.bytes().next_multiple_of(4096))
}

/// Bytes of the store; an error for one larger than the address space (its size would
/// wrap, and a pool far too small for it pass as large enough).
fn store_bytes(opts: &DurableOptions) -> Result<u64, RpcError> {
    let kv = KvLayout {
        base: 0,
        objects: opts.objects,
        max_value: opts.max_value as u64,
    };
    kv.checked_bytes().ok_or_else(|| {
        RpcError::Malformed(format!(
            "server options: a store of {} objects of {} bytes exceeds the address space",
            kv.objects,
            kv.slot_bytes()
        ))
    })
}

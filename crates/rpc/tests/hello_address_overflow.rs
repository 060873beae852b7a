//! A hostile or broken server's `DurableHello` must not name a redo log, or an object
//! store, whose end lies past the address space: the client computes every entry's
//! address as `base + 128 + slot * entry_bytes` (and a checker every object's as
//! `kv_base + key * slot_bytes`), which then overflows (a panic in a debug build, a wrapped
//! address in a release one). The hello already refuses replies too large for a message
//! for the same reason; the log and the store were left out.

use remora_rpc::durable::{ConnInfo, DurableOptions};
use remora_rpc::real::{DurableHello, HelloError};
use remora_rpc::Design;

fn hello(log_base: u64, kv_base: u64, objects: u64) -> DurableHello {
    let mut opts = DurableOptions::new(Design::WFlushRpc);
    opts.capacity = 16;
    opts.objects = objects;
    DurableHello {
        info: ConnInfo {
            config: "DMP+DDIO+PM-RQWRB".parse().unwrap(),
            layout: opts.log_layout(log_base).unwrap(),
            log_rkey: 77,
            processed: 9,
            processed_before_recovery: 7,
        },
        kv_base,
        key: 3,
        opts,
    }
}

#[test]
fn a_log_past_the_end_of_the_address_space_is_refused() {
    let ok = hello(0x1_0000_0000, 0x2_0000_0000, 64);
    assert_eq!(DurableHello::parse(&ok.emit()), Ok(ok.clone()));
    // Its last entry's address overflows, not only its end.
    let h = hello(u64::MAX - 4095, 0x2_0000_0000, 64);
    let last = h.info.layout.capacity as u64;
    assert!(h
        .info
        .layout
        .base
        .checked_add(
            remora_rpc::redolog::ENTRIES_OFFSET + (last - 1) * h.info.layout.entry_bytes as u64
        )
        .is_none());
    let got = DurableHello::parse(&h.emit());
    assert!(
        matches!(got, Err(HelloError::BadValue(_))),
        "a log at {:#x} of {} bytes was accepted: {got:?}",
        h.info.layout.base,
        h.info.layout.bytes()
    );
}

#[test]
fn a_store_past_the_end_of_the_address_space_is_refused() {
    for (kv_base, objects) in [(u64::MAX - 4095, 64), (0x2_0000_0000, u64::MAX / 2)] {
        let h = hello(0x1_0000_0000, kv_base, objects);
        assert!(h
            .kv_layout()
            .slot_bytes()
            .checked_mul(objects)
            .and_then(|b| kv_base.checked_add(b))
            .is_none());
        let got = DurableHello::parse(&h.emit());
        assert!(
            matches!(got, Err(HelloError::BadValue(_))),
            "a store at {kv_base:#x} of {objects} objects was accepted: {got:?}"
        );
    }
}

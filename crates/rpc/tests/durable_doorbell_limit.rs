//! The WRITE designs' doorbell is a WRITE_WITH_IMM whose 32-bit immediate is the last
//! sequence number written, so a connection of WFlush-RPC or W-RFlush-RPC numbers at most
//! 2^32 - 1 requests. Request 2^32 is refused before anything of it is posted: the client
//! says why, holds nothing unacknowledged, and says so again on the next call (it wrote
//! the entry, committed it for a sender-side Flush, then failed on the doorbell: a request
//! reported as failed sat committed in the log, to be executed by the next recovery, and
//! every later call failed as "dropped while posting").

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_rpc::durable::{read_entry, DurableOptions, DurablePair};
use remora_rpc::harness::dmp;
use remora_rpc::redolog::EntryState;
use remora_rpc::{Design, Op, RpcClient, RpcError};
use remora_verbs::{Space, Verbs};

#[test]
fn the_last_32_bit_doorbell_is_a_clear_limit() {
    for design in [Design::WFlushRpc, Design::WRFlushRpc] {
        let mut o = DurableOptions::new(design);
        o.capacity = 8;
        o.objects = 4;
        o.max_value = 64;
        let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
        // A log processed up to 2^32 - 2: its next requests are 2^32 - 1 and 2^32.
        let fresh = pair.fresh_server().unwrap();
        let at = fresh.conn_info().layout.watermark_addr();
        let s = pair.server.clone();
        pair.sim
            .block_on(Instant::NEVER, async move {
                s.store(Space::Pm, at, &((1u64 << 32) - 2).to_le_bytes());
                s.persist_local(at, 8).await;
            })
            .unwrap();
        drop(fresh);
        pair.sim.crash_now(pair.server.id());
        let (server, _) = pair.recover_server().unwrap();
        let layout = server.conn_info().layout;
        let mut client = pair.serve_client(server, &pair.opts.clone()).unwrap();
        let put = |key: u64| Op::Put {
            key,
            value: vec![key as u8; 16],
        };
        let (last, over, again, unacked, client) = pair
            .sim
            .block_on(Instant::NEVER, async move {
                let last = client.call(put(1)).await;
                let over = client.call(put(2)).await;
                let again = client.call(put(3)).await;
                let unacked = client.unacknowledged();
                (last, over, again, unacked, client)
            })
            .unwrap();
        assert_eq!(last.unwrap().seq, (1 << 32) - 1, "{design}");
        for (what, e) in [("first", over), ("second", again)] {
            assert!(
                matches!(&e, Err(RpcError::Unsupported { what, .. })
                    if what.contains("32-bit doorbell")),
                "{design}: the {what} call past the limit: {e:?}"
            );
        }
        assert_eq!(unacked, Vec::<u64>::new(), "{design}");
        assert_eq!(client.issued(), (1 << 32) - 1, "{design}");
        pair.sim.run();
        assert_eq!(
            read_entry(&pair.server, &layout, pair.opts.conn, 1 << 32),
            EntryState::Uncommitted,
            "{design}: request 2^32 is in the log though its call failed"
        );
        assert_eq!(
            pair.executions.borrow().get(&(1, (1 << 32) - 1)).copied(),
            Some(1),
            "{design}"
        );
    }
}

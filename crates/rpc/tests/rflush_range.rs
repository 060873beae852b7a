//! Native RFlush over a run of log entries: its range is one SGE, so a run whose bytes
//! reach 4 GiB is split, and the notification never vouches for entries the RFlush did not
//! persist. (Found by review: the length was cast to 32 bits, so two entries of 2 GiB were
//! flushed as 256 bytes and acknowledged durable.) The control has the same workload with
//! 1 MiB entries.

use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_rpc::api::Op;
use remora_rpc::design::{Design, FlushForm};
use remora_rpc::durable::{DurableOptions, DurablePair};
use remora_rpc::proto::Request;

/// Runs a batch of two Puts (a small one, then one of `big` bytes) on W-RFlush-RPC with
/// native RFlush, DMP without DDIO, entries of `max_value`; at the instant the client
/// learns the batch is durable the server loses power. Returns whether entry 2's frame
/// is in the crash image, and the number of RFlushes posted.
fn second_entry_durable_at_ack(max_value: u32, big: usize) -> (bool, u64) {
    let cfg: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
    let mut o = DurableOptions::new(Design::WRFlushRpc);
    o.flush.form = FlushForm::Native;
    o.capacity = 2;
    o.objects = 2;
    o.max_value = max_value;
    o.max_scan = 1;
    o.batch = 2;
    let pair = DurablePair::new(1, LatencyProfile::default_profile(), cfg, o.clone());
    let plan = o.plan(&cfg).unwrap();
    assert!(plan.receiver_rflush && plan.frame_commits());
    let mut client = pair.open().unwrap();
    let layout = o.log_layout(0).unwrap();
    let ops = vec![
        Op::Put {
            key: 0,
            value: vec![7; 40],
        },
        Op::Put {
            key: 1,
            value: vec![9; big],
        },
    ];
    let second = Request {
        conn: o.conn,
        seq: 2,
        op: ops[1].clone(),
    }
    .to_bytes();
    let done = pair
        .sim
        .block_on(Instant::NEVER, async move { client.call_batch(ops).await })
        .unwrap()
        .unwrap();
    assert!(
        done.iter().all(|c| c.durable_at.is_some()),
        "both acknowledged durable"
    );
    let rflushes = pair.server_stats().rflushes;
    pair.sim.crash_now(pair.server.id());
    // The server's log base: the first PM allocation of the server node.
    let log_base = remora_model::rnic::PM_BASE; // first PM allocation (4096-aligned)
    let at = layout.data_addr(2) + log_base;
    let got = pair.sim.with_rnic(pair.server.id(), |r, now| {
        r.hierarchy().durable(now).read_vec(at, second.len())
    });
    (got == second, rflushes)
}

#[test]
fn control_entries_under_4_gib_are_durable_at_the_notification() {
    let (ok, n) = second_entry_durable_at_ack(1 << 20, 256 << 10);
    assert!(
        ok,
        "entry 2 not durable at ack with 1 MiB entries ({n} rflushes)"
    );
}

#[test]
fn rflush_of_a_run_spanning_4_gib_covers_every_acknowledged_entry() {
    let (ok, n) = second_entry_durable_at_ack(1 << 31, 256 << 10);
    assert!(
        ok,
        "entry 2 acknowledged durable by the RFlush notification but not in PM ({n} rflushes)"
    );
}

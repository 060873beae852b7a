//! Native SFlush and RFlush (the model's seed 003 §4.1 opcodes) in the durable RPCs, next
//! to their emulations (§4.1.3): both forms run every design to the end, and their costs
//! differ the way the model says they should.

use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_rpc::durable::{DurableOptions, DurablePair, ServerStats};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use remora_verbs::Verbs;
use std::cell::RefCell;
use std::rc::Rc;

const CONFIGS: [&str; 3] = [
    "DMP+noDDIO+PM-RQWRB",
    "DMP+DDIO+PM-RQWRB",
    "MHP+DDIO+PM-RQWRB",
];

struct Outcome {
    /// Mean time from issuing a Put to its durability acknowledgement, ns.
    put_ns: u64,
    stats: ServerStats,
    /// Lines the server's CPU wrote back with `clwb`.
    clwb_lines: u64,
    /// Replies the final drain returned.
    replies: usize,
}

fn run(design: Design, form: FlushForm, config: &str, batch: u32) -> Outcome {
    let config: ServerConfig = config.parse().unwrap();
    let mut opts = DurableOptions::new(design);
    opts.flush.form = form;
    opts.capacity = 8;
    opts.objects = 4;
    opts.max_value = 512;
    opts.batch = batch;
    let pair = DurablePair::new(11, LatencyProfile::default_profile(), config, opts);
    let client = pair.open().unwrap();
    let out = Rc::new(RefCell::new(None));
    let (o, node) = (out.clone(), pair.client.clone());
    pair.sim.spawn_on(&pair.client, async move {
        let mut c = client;
        let mut total = 0u64;
        let puts: Vec<Op> = (0..16u64)
            .map(|i| Op::Put {
                key: i % 4,
                value: vec![i as u8 + 1; 256],
            })
            .collect();
        for chunk in puts.chunks(batch as usize) {
            let t0 = node.now();
            let done = c.call_batch(chunk.to_vec()).await.unwrap();
            for d in &done {
                total += d
                    .durable_at
                    .expect("a Put is acknowledged durable")
                    .as_nanos()
                    - t0.as_nanos();
            }
            // Let the server finish so every Put is measured on an idle server.
            c.drain().await.unwrap();
        }
        let g = c.call(Op::Get { key: 3 }).await.unwrap();
        assert_eq!(g.reply.unwrap().value, vec![16u8; 256]);
        let replies = c.drain().await.unwrap();
        *o.borrow_mut() = Some((total / 16, replies.len()));
    });
    pair.sim.run();
    let (put_ns, replies) = out.borrow_mut().take().expect("client finished");
    let store = pair.store().unwrap();
    for k in 0..4u64 {
        let (_, v) = store.read(k).unwrap().expect("written");
        assert_eq!(v, vec![13 + k as u8; 256], "{design} {form:?} key {k}");
    }
    for (k, n) in pair.executions.borrow().iter() {
        assert_eq!(*n, 1, "{design} {form:?}: {k:?} executed {n} times");
    }
    let clwb_lines = pair
        .sim
        .with_rnic(pair.server.id(), |r, _| r.hierarchy().stats().clwb_lines);
    Outcome {
        put_ns,
        stats: pair.server_stats(),
        clwb_lines,
        replies,
    }
}

#[test]
fn native_and_emulated_forms_run_every_design_everywhere() {
    for c in CONFIGS {
        for d in Design::DURABLE {
            for form in [FlushForm::Native, FlushForm::Emulated] {
                for batch in [1, 4] {
                    let o = run(d, form, c, batch);
                    assert_eq!(o.stats.processed, 17, "{d} {form:?} {c} batch {batch}");
                    assert_eq!(o.stats.bad_entries, 0, "{d} {form:?} {c}");
                    let native_rflush = form == FlushForm::Native
                        && matches!(d, Design::SRFlushRpc | Design::WRFlushRpc);
                    assert_eq!(o.stats.rflushes > 0, native_rflush, "{d} {form:?} {c}");
                    assert_eq!(
                        o.replies, 0,
                        "{d} {form:?} {c}: every reply returned by call"
                    );
                }
            }
        }
    }
}

/// Native RFlush: the responder's RNIC persists the entry and notifies; its CPU writes
/// back nothing for the request (no `clwb` of data or operator), and the acknowledgement
/// comes sooner than the emulation's (CPU `clwb`+`sfence` of data, then of the operator,
/// then a SEND). Under DMP+DDIO the CPU's write-back stays (§4.4.2).
#[test]
fn native_rflush_spends_no_responder_cpu_flush_and_acknowledges_sooner() {
    for d in [Design::SRFlushRpc, Design::WRFlushRpc] {
        let c = "DMP+noDDIO+PM-RQWRB";
        let native = run(d, FlushForm::Native, c, 1);
        let emulated = run(d, FlushForm::Emulated, c, 1);
        eprintln!(
            "{d} {c}: native {} ns ({} clwb lines), emulated {} ns ({} clwb lines)",
            native.put_ns, native.clwb_lines, emulated.put_ns, emulated.clwb_lines
        );
        assert_eq!(native.stats.cpu_persisted, 0, "{d}");
        assert_eq!(emulated.stats.cpu_persisted, 17, "{d}: 16 Puts and a Get");
        // The emulation's CPU writes back at least each request's operator line (with DDIO
        // off the DMA'd data is not in the LLC: its `clwb` only waits for the WPQ).
        assert!(
            native.clwb_lines + 17 <= emulated.clwb_lines,
            "{d}: native {} vs emulated {} clwb lines",
            native.clwb_lines,
            emulated.clwb_lines
        );
        assert!(
            native.put_ns < emulated.put_ns,
            "{d}: native {} ns, emulated {} ns",
            native.put_ns,
            emulated.put_ns
        );
        let ddio = run(d, FlushForm::Native, "DMP+DDIO+PM-RQWRB", 1);
        assert_eq!(ddio.stats.cpu_persisted, 17, "{d}: §4.4.2 CPU flush kept");
        assert!(ddio.stats.rflushes > 0, "{d}");
    }
}

/// Native SFlush: the responder's RNIC pays the lookup (`rnic.sflush_lookup_ns`, 7 µs)
/// after the SFlush arrives, plus a PCIe round trip to find the landing; the emulation
/// (§4.1.3) waits the same 7 µs at the sender, overlapped with the SEND's flight, then
/// READs. The model therefore puts the two within a few hundred nanoseconds of each other,
/// both above the 7 µs lookup, and neither uses the responder's CPU.
#[test]
fn native_sflush_costs_about_its_emulation() {
    for c in ["DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB"] {
        let native = run(Design::SFlushRpc, FlushForm::Native, c, 1);
        let emulated = run(Design::SFlushRpc, FlushForm::Emulated, c, 1);
        eprintln!(
            "SFlush-RPC {c}: native {} ns, emulated {} ns",
            native.put_ns, emulated.put_ns
        );
        assert_eq!(native.stats.cpu_persisted, 0);
        assert_eq!(emulated.stats.cpu_persisted, 0);
        assert!(
            native.put_ns.abs_diff(emulated.put_ns) < 1_000,
            "{c}: native {} ns, emulated {} ns",
            native.put_ns,
            emulated.put_ns
        );
        assert!(native.put_ns > 7_000 && emulated.put_ns > 7_000, "{c}");
    }
}

//! `rnic.rnr_retry_delay_ns` is the only time a requester refused with an RNR NAK waits
//! before it sends again (seed 000 §4.3 describes the jitter these retries cause). A profile
//! that `LatencyProfile::from_toml` accepts must let a SEND that waits for its receive
//! finish once the receive is posted: either the profile is refused naming the field, or
//! virtual time moves on between retries and the SEND completes.

mod common;
use common::{cfg, Opts};
use remora_model::profile::{LatencyProfile, ProfileError, DEFAULT_TOML};
use remora_model::time::{Duration, Instant};
use remora_sim::{CrashAt, FaultPlan};
use remora_verbs::*;

/// Events after which the run is cut (the client loses power): a SEND retried against a
/// receive posted 20 µs later needs some hundreds; a run that has not finished by then
/// retries without time passing.
const EVENT_BOUND: u64 = 200_000;

/// A SEND of `len` bytes to a server that posts its receive 20 µs in. Returns the SEND's
/// completion (`None` if the run was cut at [`EVENT_BOUND`]), the RNR NAKs the server sent
/// and when the run was cut, if it was.
fn send_before_receive(
    profile: LatencyProfile,
    len: usize,
) -> (Option<WorkCompletion>, u64, Option<Instant>) {
    let p = Opts::new(1, cfg("DMP+DDIO+DRAM-RQWRB"))
        .profile(profile)
        .build();
    p.sim.set_faults(&FaultPlan::crash(
        p.client.id(),
        CrashAt::Event(EVENT_BOUND),
    ));
    let (srv, sqp, rmr) = (p.server.clone(), p.sqp, p.rmr);
    p.sim.spawn_on(&p.server, async move {
        srv.sleep(Duration::from_micros(20)).await;
        let rwr = RecvWr {
            wr_id: 9,
            sge: Sge {
                addr: rmr.addr,
                len: 64,
                lkey: rmr.lkey,
            },
        };
        srv.post_recv(sqp, rwr).unwrap();
    });
    let (c, cqp, ccq) = (p.client.clone(), p.cqp, p.ccq);
    let wc = p.sim.block_on(Instant::NEVER, async move {
        let send = SendWr::new(1, Opcode::Send, Payload::inline(vec![5; len]), None);
        c.post_send(cqp, send).unwrap();
        next_completion(&c, ccq).await
    });
    let naks = p.sim.with_rnic(p.server.id(), |r, _| r.stats().rnr_naks);
    let cut = p.sim.crashed().first().map(|&(_, at)| at);
    (wc, naks, cut)
}

/// The default profile with every latency of the data path free: only the RNR delay can
/// make time pass between a refused SEND and its retry.
fn free_data_path(rnr_delay_ns: u64) -> String {
    let mut t = DEFAULT_TOML.to_string();
    for (from, to) in [
        ("nic_rtt_ns = 1000", "nic_rtt_ns = 0"),
        ("header_bytes = 64", "header_bytes = 0"),
        ("proc_ns = 50", "proc_ns = 0"),
        ("pcie_ns = 250", "pcie_ns = 0"),
        ("translation_miss_every = 16", "translation_miss_every = 0"),
        ("iio_ns = 50", "iio_ns = 0"),
        ("imc_ns = 60", "imc_ns = 0"),
        ("imc_jitter_ns = 120", "imc_jitter_ns = 0"),
        ("llc_ns = 19", "llc_ns = 0"),
        ("dram_ns = 100", "dram_ns = 0"),
    ] {
        assert!(t.contains(from), "{from}");
        t = t.replace(from, to);
    }
    t.replace(
        "rnr_retry_delay_ns = 10000",
        &format!("rnr_retry_delay_ns = {rnr_delay_ns}"),
    )
}

#[test]
fn a_zero_rnr_delay_is_refused_not_retried_without_time_passing() {
    // An empty SEND on a free data path, retried at once: each RNR NAK comes back at the
    // instant its SEND left, and virtual time never reaches the receive.
    match LatencyProfile::from_toml(&free_data_path(0)) {
        Err(e @ ProfileError::Invalid { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("rnic.rnr_retry_delay_ns"), "{msg}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(p) => {
            let (wc, naks, cut) = send_before_receive(p, 0);
            assert!(
                wc.is_some_and(|wc| wc.status == WcStatus::Success),
                "a profile the validation accepted never delivers the SEND: {naks} RNR NAKs \
                 in {EVENT_BOUND} events, cut at {cut:?} (the receive is posted at 20 µs)"
            );
        }
    }
}

#[test]
fn a_positive_rnr_delay_moves_time_on_even_on_a_free_data_path() {
    // The smallest delay the validation accepts: each retry waits a nanosecond, and the
    // SEND is delivered once the receive is posted.
    let p = LatencyProfile::from_toml(&free_data_path(1)).unwrap();
    let (wc, naks, _) = send_before_receive(p, 0);
    let wc = wc.expect("the SEND completes within the bound");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert!(naks > 0, "the SEND met the missing receive");
    // The default profile: one retry per delay (10 µs) over the 20 µs without a receive.
    let (wc, naks, _) = send_before_receive(LatencyProfile::default_profile(), 16);
    assert_eq!(wc.map(|wc| wc.status), Some(WcStatus::Success));
    assert_eq!(naks, 2);
}

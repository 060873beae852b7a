//! What the writes WSP holds in the RNIC buffer cost the hierarchy (`hierarchy/held.rs`):
//! a burst of ATOMIC WRITEs, each waiting for the one before, held on arrival and let go
//! as each executes. Spread over 8,192 words, and stacked on one word (what a peer that
//! means harm sends). `cargo bench -p remora-model --bench held`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::{Body, Packet};

/// A WSP server node, a client QP number for it, and its region.
fn server() -> (Rnic, QpNum, QpNum, MrInfo) {
    let mut r = Rnic::new(
        2,
        "WSP+noDDIO+PM-RQWRB".parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(2),
    );
    let pd = r.alloc_pd();
    let a = r.alloc(Space::Pm, 1 << 16, 4096);
    let mr = r.reg_mr(pd, Space::Pm, a, 1 << 16, Access::ALL).unwrap();
    let cq = r.create_cq(64).unwrap();
    let qp = r.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    let peer_qp = QpNum(7);
    r.connect(qp, 1, peer_qp).unwrap();
    (r, qp, peer_qp, mr)
}

/// `n` ATOMIC WRITEs at once to `words` words of the region, then the RNIC's time until
/// every one executed; returns how many were held at once.
fn burst(n: u32, words: u64) -> usize {
    let (mut r, qp, peer_qp, mr) = server();
    let t = Instant::ZERO + Duration::from_micros(1);
    for psn in 0..n {
        let p = Packet {
            src: 1,
            dst: 2,
            src_qp: peer_qp,
            dst_qp: qp,
            psn,
            body: Body::NonPostedWrite {
                addr: mr.addr + 8 * (psn as u64 % words),
                rkey: mr.rkey,
                data: vec![psn as u8; 8].into(),
                atomic: true,
            },
        };
        r.handle_packet(t, &p);
    }
    let held = r.hierarchy().held_writes();
    let mut now = t;
    while r.hierarchy().held_writes() > 0 {
        now += Duration::from_micros(100);
        r.handle_timeout(now);
        while r.poll_transmit().is_some() {}
    }
    held
}

fn held(c: &mut Criterion) {
    let mut g = c.benchmark_group("held ATOMIC WRITEs, held and let go");
    g.sample_size(10);
    for n in [4096u32, 16384] {
        for (name, words) in [
            ("spread over 8192 words", 8192u64),
            ("stacked on one word", 1),
        ] {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                b.iter(|| assert_eq!(burst(n, words), n as usize - 1))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, held);
criterion_main!(benches);

//! The requests around a failing one: earlier ones complete normally, later ones are
//! flushed with WrFlushErr (property), and an iWARP access error is not silently lost.

use super::*;
use proptest::prelude::*;
use remora_model::time::Duration;

/// Requests posted before a failing one complete normally (IBTA: the responder handles
/// requests in PSN order, and a NAK acknowledges every earlier request). Here a READ or
/// CAS waits at the responder behind an earlier FLUSH when the request after it is refused.
#[test]
fn requests_before_a_failing_one_complete_normally() {
    for with_cas in [false, true] {
        let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 64;
        p.server.store(Space::Pm, a, &41u64.to_le_bytes());
        let second = if with_cas {
            p.cas(2, a, 41, 42, p.lmr.addr)
        } else {
            p.read(2, a, 8, p.lmr.addr)
        };
        let mut bad = p.write(3, a + 64, vec![1; 8]);
        bad.remote = Some(Remote {
            addr: a + 64,
            rkey: p.mr.rkey ^ 0xffff,
        });
        let wcs = p.run_ops(vec![p.flush(1, a, 8, PERSIST), second, bad]);
        assert_eq!(
            statuses(&wcs),
            vec![
                (1, WcStatus::Success),
                (2, WcStatus::Success),
                (3, WcStatus::RemAccessErr)
            ],
            "cas {with_cas}: the request before the failing one completes normally"
        );
        assert_eq!(u64_at(&p.client_bytes(p.lmr.addr, 8)), 41);
        let server_now = u64_at(&p.pm(a, 8));
        assert_eq!(server_now, if with_cas { 42 } else { 41 });
    }
}

/// Without a request waiting at the responder, the READ before a failing WRITE does
/// complete normally: its response leaves the responder before the NAK.
#[test]
fn a_read_before_a_failing_write_completes_normally() {
    for with_cas in [false, true] {
        let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 64;
        p.server.store(Space::Pm, a, &41u64.to_le_bytes());
        let first = if with_cas {
            p.cas(1, a, 41, 42, p.lmr.addr)
        } else {
            p.read(1, a, 8, p.lmr.addr)
        };
        let mut bad = p.write(2, a + 64, vec![1; 8]);
        bad.remote = Some(Remote {
            addr: a + 64,
            rkey: p.mr.rkey ^ 0xffff,
        });
        let wcs = p.run_ops(vec![first, bad]);
        assert_eq!(
            statuses(&wcs),
            vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)],
            "cas {with_cas}"
        );
        assert_eq!(u64_at(&p.client_bytes(p.lmr.addr, 8)), 41);
        assert_eq!(u64_at(&p.pm(a, 8)), if with_cas { 42 } else { 41 });
    }
}

/// On iWARP a posted WRITE completes before the responder checks it; when the responder
/// then refuses it, the requester's QP must still learn of it (RDMAP Terminate): later
/// requests may not "succeed" without ever executing.
#[test]
fn an_iwarp_access_error_is_not_silently_lost() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB"))
        .client(cfg("DMP+noDDIO+PM-RQWRB@iwarp"))
        .build();
    let a = p.mr.addr + 512;
    let data = pattern(64, 0x44);
    let mut bad = p.write(1, a, vec![1; 8]);
    bad.remote = Some(Remote {
        addr: a,
        rkey: p.mr.rkey + 7,
    });
    let good = p.write(2, a, data.clone());
    let (c, cq, qp) = (p.client.clone(), p.ccq, p.cqp);
    let (first, posted, second) = p
        .sim
        .block_on(Instant::NEVER, async move {
            c.post_send(qp, bad).unwrap();
            let first = next_completion(&c, cq).await.status;
            // Long after the NAK came back.
            c.sleep(Duration::from_micros(20)).await;
            let posted = c.post_send(qp, good);
            let second = match posted {
                Ok(()) => Some(next_completion(&c, cq).await.status),
                Err(_) => None,
            };
            (first, posted, second)
        })
        .unwrap();
    p.sim.run();
    let landed = p.pm(a, 64) == data;
    assert!(
        first != WcStatus::Success
            || posted.is_err()
            || second != Some(WcStatus::Success)
            || landed,
        "first {first:?}, later post {posted:?} completed {second:?}, but its data never \
         reached the server"
    );
}

#[derive(Clone, Debug)]
enum Bad {
    WriteRkey,
    WriteOob,
    ReadOob,
    CasMisaligned,
    AwMisaligned,
    FaaRkey,
}

#[derive(Clone, Debug)]
enum After {
    Write(u64, bool),
    Read(u64),
    Cas(u64),
    Faa(u64),
    Flush,
    AtomicWrite(u64),
    Send(bool),
}

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        Just(Bad::WriteRkey),
        Just(Bad::WriteOob),
        Just(Bad::ReadOob),
        Just(Bad::CasMisaligned),
        Just(Bad::AwMisaligned),
        Just(Bad::FaaRkey),
    ]
}

fn after() -> impl Strategy<Value = After> {
    prop_oneof![
        (0..8u64, any::<bool>()).prop_map(|(s, sig)| After::Write(s, sig)),
        (0..8u64).prop_map(After::Read),
        (0..8u64).prop_map(After::Cas),
        (0..8u64).prop_map(After::Faa),
        Just(After::Flush),
        (0..8u64).prop_map(After::AtomicWrite),
        any::<bool>().prop_map(After::Send),
    ]
}

fn prop_config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(prop_config())]

    /// Posted WRITEs, one remote access violation, then any requests: the WRITEs before
    /// it take effect (signaled ones complete successfully, in order), the violation
    /// completes with RemAccessErr whether signaled or not, every later request completes
    /// exactly once with WrFlushErr whether signaled or not, and none of them executes.
    #[test]
    fn a_violation_flushes_everything_behind_it(
        before in prop::collection::vec((0..8u64, 1..=64u64, any::<bool>()), 0..8),
        bad in bad(),
        bad_signaled in any::<bool>(),
        later in prop::collection::vec(after(), 0..10),
        name in prop::sample::select(vec![
            "DMP+DDIO+PM-RQWRB", "DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB", "WSP+noDDIO+PM-RQWRB@roce",
        ]),
        seed in 0..1000u64,
    ) {
        let p = Pair::new(seed, cfg(name));
        let area = p.mr.addr + 4096;
        let mut model = vec![0u8; 1024];
        let mut wrs = Vec::new();
        let mut expect = Vec::new();
        for (i, &(slot, len, signaled)) in before.iter().enumerate() {
            let d = pattern(len as usize, i as u8 + 1);
            model[(slot * 64) as usize..(slot * 64 + len) as usize].copy_from_slice(&d);
            wrs.push(p.write(i as u64, area + slot * 64, d).signaled(signaled));
            if signaled {
                expect.push((i as u64, WcStatus::Success));
            }
        }
        let id = 100;
        let wrong = Some(Remote { addr: area, rkey: p.mr.rkey.wrapping_add(77) });
        let wr = match bad {
            Bad::WriteRkey => SendWr { remote: wrong, ..p.write(id, area, vec![0xee; 32]) },
            Bad::WriteOob => p.write(id, p.mr.addr + PM_LEN - 16, vec![0xee; 32]),
            Bad::ReadOob => p.read(id, p.mr.addr + PM_LEN - 16, 32, p.lmr.addr),
            Bad::CasMisaligned => p.cas(id, area + 4, 0, u64::MAX, p.lmr.addr),
            Bad::AwMisaligned => p.atomic_write(id, area + 12, u64::MAX),
            Bad::FaaRkey => SendWr { remote: wrong, ..p.faa(id, area, 1, p.lmr.addr) },
        };
        wrs.push(wr.signaled(bad_signaled));
        expect.push((id, WcStatus::RemAccessErr));
        for (k, a) in later.iter().enumerate() {
            let id = 200 + k as u64;
            let l = p.lmr.addr + 4096 + k as u64 * 64;
            let wr = match *a {
                After::Write(s, sig) => p.write(id, area + s * 64, vec![0xaa; 64]).signaled(sig),
                After::Read(s) => p.read(id, area + s * 64, 64, l),
                After::Cas(s) => p.cas(id, area + s * 64, 0, u64::MAX, l),
                After::Faa(s) => p.faa(id, area + s * 64, 1, l),
                After::Flush => p.flush(id, area, 1024, PERSIST),
                After::AtomicWrite(s) => p.atomic_write(id, area + s * 64, u64::MAX),
                After::Send(sig) => p.send(id, vec![0xaa; 8]).signaled(sig),
            };
            wrs.push(wr);
            expect.push((id, WcStatus::WrFlushErr));
        }
        p.server.post_recv(p.sqp, p.recv(0, 0, 64)).unwrap();
        let local_before = pattern(64, 0x42);
        p.client.store(Space::Dram, p.lmr.addr, &local_before);
        let wcs = p.run_ops(wrs);
        prop_assert_eq!(statuses(&wcs), expect);
        prop_assert_eq!(p.pm(area, 1024), model);
        prop_assert_eq!(p.pm(p.mr.addr + PM_LEN - 16, 16), vec![0; 16]);
        prop_assert_eq!(p.client_bytes(p.lmr.addr, 64), local_before);
        prop_assert_eq!(p.server_bytes(Space::Dram, p.rmr.addr, 8), vec![0; 8]);
    }
}

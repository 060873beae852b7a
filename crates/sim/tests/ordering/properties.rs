//! Property tests against sequential models: random WRITEs then a READ, and random mixes of
//! posted and non-posted operations completing in posting order.

use super::*;
use proptest::prelude::*;

const REGION: u64 = 1024;

#[derive(Clone, Debug)]
struct W {
    off: u64,
    len: u64,
    signaled: bool,
    inline: bool,
    salt: u8,
}

fn writes() -> impl Strategy<Value = Vec<W>> {
    prop::collection::vec(
        (
            0..REGION,
            1..=300u64,
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
        )
            .prop_map(|(off, len, signaled, inline, salt)| W {
                off,
                len: len.min(REGION - off),
                signaled,
                inline,
                salt,
            }),
        1..24,
    )
}

const CONFIGS: [&str; 5] = [
    "DMP+DDIO+PM-RQWRB",
    "DMP+noDDIO+PM-RQWRB",
    "MHP+noDDIO+DRAM-RQWRB",
    "WSP+DDIO+PM-RQWRB",
    "DMP+noDDIO+PM-RQWRB@iwarp",
];

fn config() -> impl Strategy<Value = &'static str> {
    prop::sample::select(CONFIGS.to_vec())
}

fn prop_config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
        len: u64,
        salt: u8,
    },
    WriteImm {
        off: u64,
        len: u64,
        salt: u8,
        imm: u32,
    },
    Send {
        len: u64,
        salt: u8,
        imm: Option<u32>,
    },
    ReadP {
        off: u64,
        len: u64,
    },
    ReadQ,
    Cas {
        slot: u64,
        hit: bool,
        swap: u64,
    },
    Faa {
        slot: u64,
        add: u64,
    },
    AtomicWrite {
        slot: u64,
        value: u64,
    },
    Flush {
        persist: bool,
    },
}

/// Posted writes go to region P (512 bytes); atomics to region Q (8 slots of 8 bytes):
/// P is written only by posted operations and Q only by non-posted ones, so each region
/// has an exact sequential reference.
const P_LEN: u64 = 512;
const Q_OFF: u64 = 4096;

fn op() -> impl Strategy<Value = Op> {
    let span = (0..P_LEN, 1..=96u64).prop_map(|(off, len)| (off, len.min(P_LEN - off)));
    prop_oneof![
        3 => (span.clone(), any::<u8>()).prop_map(|((off, len), salt)| Op::Write { off, len, salt }),
        1 => (span.clone(), any::<u8>(), any::<u32>())
            .prop_map(|((off, len), salt, imm)| Op::WriteImm { off, len, salt, imm }),
        1 => (1..=64u64, any::<u8>(), prop::option::of(any::<u32>()))
            .prop_map(|(len, salt, imm)| Op::Send { len, salt, imm }),
        2 => span.prop_map(|(off, len)| Op::ReadP { off, len }),
        1 => Just(Op::ReadQ),
        1 => (0..8u64, any::<bool>(), any::<u64>()).prop_map(|(slot, hit, swap)| Op::Cas { slot, hit, swap }),
        1 => (0..8u64, any::<u64>()).prop_map(|(slot, add)| Op::Faa { slot, add }),
        1 => (0..8u64, any::<u64>()).prop_map(|(slot, value)| Op::AtomicWrite { slot, value }),
        1 => any::<bool>().prop_map(|persist| Op::Flush { persist }),
    ]
}

/// A receive completion the server should see: opcode, byte_len, imm, and for a SEND the
/// payload in the buffer.
type ExpectRecv = (WcOpcode, u32, Option<u32>, Option<Vec<u8>>);

/// Appends the state after a posted write of `data` at `off`.
fn apply_p(states: &mut Vec<Vec<u8>>, off: u64, data: &[u8]) {
    let mut s = states.last().unwrap().clone();
    s[off as usize..off as usize + data.len()].copy_from_slice(data);
    states.push(s);
}

fn data_of(len: u64, salt: u8, i: usize) -> Vec<u8> {
    pattern(len as usize, salt ^ (i as u8).wrapping_mul(17))
}

proptest! {
    #![proptest_config(prop_config())]

    /// Random WRITEs (offsets, lengths, inline or SGE payloads, signaled or not) then a
    /// READ over the region: the READ returns exactly what a flat array model says, the
    /// server holds it too, and only the signaled requests complete, in posting order.
    #[test]
    fn writes_then_a_read_match_a_flat_array_model(
        ws in writes(),
        name in config(),
        seed in 0..1000u64,
    ) {
        let p = Pair::new(seed, cfg(name));
        let base = p.mr.addr + 64;
        let mut model = vec![0u8; REGION as usize];
        let mut wrs = Vec::new();
        let mut expect_ids = Vec::new();
        for (i, w) in ws.iter().enumerate() {
            let data = data_of(w.len, w.salt, i);
            model[w.off as usize..(w.off + w.len) as usize].copy_from_slice(&data);
            let mut wr = p.write(i as u64, base + w.off, data.clone()).signaled(w.signaled);
            if !w.inline {
                let src = p.lmr.addr + 4096 + i as u64 * 512;
                p.client.store(Space::Dram, src, &data);
                wr.local = Payload::Sge(p.local(src, w.len as u32));
            }
            if w.signaled {
                expect_ids.push(i as u64);
            }
            wrs.push(wr);
        }
        expect_ids.push(999);
        wrs.push(p.read(999, base, REGION as u32, p.lmr.addr));
        let wcs = p.run_ops(wrs);
        prop_assert_eq!(ids(&wcs), expect_ids);
        for (wc, _) in &wcs {
            prop_assert_eq!(wc.status, WcStatus::Success);
        }
        prop_assert_eq!(p.client_bytes(p.lmr.addr, REGION as usize), model.clone());
        prop_assert_eq!(p.pm(base, REGION as usize), model);
        prop_assert!(wcs.windows(2).all(|w| w[0].1 <= w[1].1), "completion times go forward");
    }

    /// Random mixtures of posted and non-posted operations (random signaled and fence
    /// flags; non-posted ones always signaled): every signaled request completes exactly
    /// once, successfully, in posting order; receives complete in order with their length
    /// and immediate; atomics and READs of Q return the sequential values; a READ of P
    /// returns a prefix of the posted writes that includes every earlier one; the final
    /// memory equals the sequential model.
    #[test]
    fn mixed_operations_complete_in_posting_order(
        ops in prop::collection::vec((op(), any::<bool>(), any::<bool>()), 1..32),
        name in config(),
        seed in 0..1000u64,
    ) {
        let p = Pair::new(seed, cfg(name));
        let pbase = p.mr.addr;
        let qbase = p.mr.addr + Q_OFF;
        let mut pstates = vec![vec![0u8; P_LEN as usize]];
        let mut q = [0u64; 8];
        let mut wrs = Vec::new();
        let mut expect_wcs = Vec::new();
        let mut expect_recvs: Vec<ExpectRecv> = Vec::new();
        // READs of P: (local addr, off, len, posted writes before it)
        let mut p_reads = Vec::new();
        // Exact results: (local addr, bytes)
        let mut exact = Vec::new();
        for (i, (op, signaled, fence)) in ops.iter().enumerate() {
            let id = i as u64;
            let l = p.lmr.addr + id * 1024;
            let wr = match *op {
                Op::Write { off, len, salt } => {
                    let d = data_of(len, salt, i);
                    apply_p(&mut pstates, off, &d);
                    p.write(id, pbase + off, d)
                }
                Op::WriteImm { off, len, salt, imm } => {
                    let d = data_of(len, salt, i);
                    apply_p(&mut pstates, off, &d);
                    expect_recvs.push((WcOpcode::RecvRdmaWithImm, len as u32, Some(imm), None));
                    p.write_imm(id, pbase + off, d, imm)
                }
                Op::Send { len, salt, imm } => {
                    let d = data_of(len, salt, i);
                    expect_recvs.push((WcOpcode::Recv, len as u32, imm, Some(d.clone())));
                    match imm {
                        Some(v) => p.send_imm(id, d, v),
                        None => p.send(id, d),
                    }
                }
                Op::ReadP { off, len } => {
                    p_reads.push((l, off, len, pstates.len() - 1));
                    p.read(id, pbase + off, len as u32, l)
                }
                Op::ReadQ => {
                    exact.push((l, q.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()));
                    p.read(id, qbase, 64, l)
                }
                Op::Cas { slot, hit, swap } => {
                    let old = q[slot as usize];
                    let compare = if hit { old } else { old.wrapping_add(1) };
                    if hit {
                        q[slot as usize] = swap;
                    }
                    exact.push((l, old.to_le_bytes().to_vec()));
                    p.cas(id, qbase + slot * 8, compare, swap, l)
                }
                Op::Faa { slot, add } => {
                    let old = q[slot as usize];
                    q[slot as usize] = old.wrapping_add(add);
                    exact.push((l, old.to_le_bytes().to_vec()));
                    p.faa(id, qbase + slot * 8, add, l)
                }
                Op::AtomicWrite { slot, value } => {
                    q[slot as usize] = value;
                    p.atomic_write(id, qbase + slot * 8, value)
                }
                Op::Flush { persist } => {
                    let placement = if persist { PERSIST } else { VISIBLE };
                    p.flush(id, pbase, P_LEN, placement)
                }
            };
            let non_posted = wr.opcode.is_non_posted();
            let signaled = *signaled || non_posted;
            if signaled {
                expect_wcs.push((id, WcOpcode::of(wr.opcode)));
            }
            wrs.push(wr.signaled(signaled).fenced(*fence));
        }
        for k in 0..expect_recvs.len() as u64 {
            p.server.post_recv(p.sqp, p.recv(k, k * 64, 64)).unwrap();
        }
        let recvs = collect(&p.sim, &p.server, p.scq);
        let wcs = p.run_ops(wrs);
        let got: Vec<(u64, WcOpcode)> = wcs.iter().map(|(w, _)| (w.wr_id, w.opcode)).collect();
        prop_assert_eq!(got, expect_wcs);
        for (wc, _) in &wcs {
            prop_assert_eq!(wc.status, WcStatus::Success, "{:?}", wc);
        }
        let recvs = recvs.borrow();
        prop_assert_eq!(recvs.len(), expect_recvs.len());
        for (k, ((wc, _), (opc, len, imm, payload))) in recvs.iter().zip(&expect_recvs).enumerate() {
            prop_assert_eq!(wc.wr_id, k as u64);
            prop_assert_eq!(wc.status, WcStatus::Success);
            prop_assert_eq!((wc.opcode, wc.byte_len, wc.imm), (*opc, *len, *imm));
            if let Some(d) = payload {
                let got = p.server_bytes(Space::Dram, p.rmr.addr + k as u64 * 64, d.len());
                prop_assert_eq!(&got, d);
            }
        }
        for (l, want) in &exact {
            prop_assert_eq!(&p.client_bytes(*l, want.len()), want);
        }
        for (l, off, len, before) in p_reads {
            let got = p.client_bytes(l, len as usize);
            let (o, e) = (off as usize, (off + len) as usize);
            prop_assert!(
                pstates[before..].iter().any(|s| s[o..e] == got[..]),
                "a READ of P after {} posted writes returned a state that is not a \
                 prefix including them",
                before
            );
        }
        prop_assert_eq!(&p.pm(pbase, P_LEN as usize), pstates.last().unwrap());
        let qfinal: Vec<u8> = q.iter().flat_map(|v| v.to_le_bytes()).collect();
        prop_assert_eq!(p.pm(qbase, 64), qfinal);
    }
}

//! seed 000 §3.2: a singleton update is "1 - 2^31 bytes"; a WRITE of it followed by a
//! FLUSH is a correct method on DMP without DDIO (and on MHP/WSP). On the shipped default
//! profile it must complete, not fail its QP with RetryExcErr because the simulator's
//! requester counts the responder's PCIe DMA of the whole message (100 Gb/s, slower than
//! the 200 Gb/s link) against the 1 ms ACK time-out of an MTU packet.

use remora_model::config::*;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::Sim;
use remora_verbs::*;

fn write_flush(profile: &str, cfg: &str, len: u64) -> WorkCompletion {
    let sim = Sim::new(1, LatencyProfile::builtin(profile).unwrap());
    let cfg: ServerConfig = cfg.parse().unwrap();
    let server = sim.add_node("server", cfg);
    let client = sim.add_node("client", cfg);
    let spd = server.alloc_pd().unwrap();
    let base = server.alloc(Space::Pm, len, 4096);
    let mr = server
        .reg_mr(spd, Space::Pm, base, len, Access::ALL)
        .unwrap();
    let scq = server.create_cq(64).unwrap();
    let sqp = server.create_qp(spd, scq, scq, QpAttr::default()).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(64).unwrap();
    let cqp = client.create_qp(cpd, ccq, ccq, QpAttr::default()).unwrap();
    sim.connect((&client, cqp), (&server, sqp)).unwrap();
    let remote = Remote {
        addr: mr.addr,
        rkey: mr.rkey,
    };
    sim.block_on(Instant::NEVER, async move {
        let data = Payload::inline(vec![7; len as usize]);
        let write = SendWr::new(1, Opcode::Write, data, Some(remote));
        client.post_send(cqp, write.signaled(false)).unwrap();
        let flush = Opcode::Flush {
            placement: FlushPlacement::Persistence,
            len,
        };
        client
            .post_send(cqp, SendWr::new(2, flush, Payload::None, Some(remote)))
            .unwrap();
        next_completion(&client, ccq).await
    })
    .unwrap()
}

#[test]
fn a_16_mib_write_and_flush_completes_on_the_default_profile() {
    for cfg in ["DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB"] {
        for len in [8 << 20, 16 << 20] {
            let wc = write_flush("default", cfg, len);
            assert_eq!(
                (wc.wr_id, wc.status),
                (2, WcStatus::Success),
                "{cfg}, {len}-byte WRITE + FLUSH"
            );
        }
    }
}

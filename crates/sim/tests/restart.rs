//! A node restarted after a power failure starts clean: nothing on its way to its previous
//! life reaches the new one.

#[path = "common/mod.rs"]
mod common;

use common::*;
use remora_model::time::Instant;
use remora_verbs::*;

/// The client SENDs "old" to the server; while the packet is on the wire the server loses
/// power and is restarted, sets its connection up again (same QP number, as a fresh RNIC
/// gives), and the client reconnects on a new QP (which reuses its number too) and SENDs
/// "new". The new life must receive "new": the packet sent to the dead one is not part of
/// the new connection.
#[test]
fn a_packet_sent_to_a_dead_life_does_not_reach_the_new_one() {
    let p = Pair::new(3, cfg("DMP+noDDIO+PM-RQWRB"));
    p.server.post_recv(p.sqp, p.recv(1, 0, 64)).unwrap();
    p.post_all(vec![p.send(1, b"old".to_vec())]);
    // The doorbell rings and the SEND leaves; it arrives a wire's time later.
    p.sim.run_until(Instant::from_nanos(1));
    let before = p
        .sim
        .with_rnic(p.server.id(), |r, _| r.stats().requests_executed);
    assert_eq!(before, 0, "the SEND is still on its way");
    p.sim.crash_now(p.server.id());
    p.sim.restart(p.server.id());
    // The new life sets up its side of the connection.
    let spd = p.server.alloc_pd().unwrap();
    let rbase = p.server.alloc(Space::Dram, RECV_LEN, 4096);
    let rmr = p
        .server
        .reg_mr(spd, Space::Dram, rbase, RECV_LEN, Access::LOCAL_WRITE)
        .unwrap();
    let scq = p.server.create_cq(64).unwrap();
    let sqp = p
        .server
        .create_qp(spd, scq, scq, QpAttr::default())
        .unwrap();
    assert_eq!(sqp, p.sqp, "a fresh RNIC numbers its QPs from the start");
    p.server
        .post_recv(
            sqp,
            RecvWr {
                wr_id: 9,
                sge: Sge {
                    addr: rmr.addr,
                    len: 64,
                    lkey: rmr.lkey,
                },
            },
        )
        .unwrap();
    // The client reconnects: a new QP on its side too.
    p.client.destroy_qp(p.cqp).unwrap();
    let cqp = p
        .client
        .create_qp(p.cpd, p.ccq, p.ccq, QpAttr::default())
        .unwrap();
    p.sim.connect((&p.client, cqp), (&p.server, sqp)).unwrap();
    p.client.post_send(cqp, p.send(2, b"new".to_vec())).unwrap();
    p.sim.run();
    let wc = p
        .server
        .poll_one(scq)
        .expect("the new life received a message");
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 3];
    p.server.load(Space::Dram, rmr.addr, &mut got);
    assert_eq!(
        &got, b"new",
        "the new life took a SEND sent to its previous life as its connection's first message"
    );
}

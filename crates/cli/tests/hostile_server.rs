//! `remotelog --server` against a server that never answers an append, though its RNIC
//! acknowledges every packet: a server whose responder never sends the method's
//! acknowledgement, and one that never posts a receive (every SEND gets a
//! receiver-not-ready NAK, retried for ever). The transport's time-out catches neither;
//! the client used to wait for ever, silently. Now each append has a deadline and the
//! client says which append the server left unanswered.

use remora::wire::{Frame, Hello};
use remora_cli::real::remotelog_against_within;
use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{QpAttr, Rnic};
use remora_model::verbs::{Access, Opcode, Payload, RecvWr, SendWr, Sge};
use remora_model::ServerConfig;
use remora_soft::runtime::{real_time_profile, RtNode};
use remora_soft::server::{cm_accepted, cm_assign, cm_hello, cm_ready};
use remora_verbs::Verbs;
use std::time::Duration;

/// A configuration whose singleton WRITE method is two-sided (write-msg: the client waits
/// for the responder's Ack frame).
const CONFIG: &str = "DMP+DDIO+DRAM-RQWRB";

/// Serves one connection: the connection manager's handshake, a library Hello, then
/// nothing. With `receives`, the server's QP has receives posted (its RNIC takes the
/// client's SENDs and acknowledges them); without, every SEND is refused as not ready.
/// Returns the address; the server thread ends with the test process.
fn silent_server(receives: bool) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        remora_exec::block_on(async move {
            let config: ServerConfig = CONFIG.parse().unwrap();
            let listener = remora_exec::net::TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap();
            tx.send(listener.local_addr().unwrap().to_string()).unwrap();
            let profile = real_time_profile(&LatencyProfile::default_profile());
            let node = RtNode::new(Rnic::new(0, config, &profile, Prng::from_seed(1)));
            remora_exec::spawn_local(node.clone().drive());
            let (mut stream, _) = listener.accept().await.unwrap();
            assert_eq!(cm_hello(&mut stream).await.unwrap(), Some(0));
            cm_assign(&mut stream, 1, config).await.unwrap();
            let pd = node.alloc_pd().unwrap();
            let a = node.alloc(Space::Pm, 1 << 16, 4096);
            let region = node.reg_mr(pd, Space::Pm, a, 1 << 16, Access::ALL).unwrap();
            let b = node.alloc(Space::Dram, 1 << 16, 4096);
            let ring = node
                .reg_mr(pd, Space::Dram, b, 1 << 16, Access::ALL)
                .unwrap();
            let cq = node.create_cq(256).unwrap();
            let qp = node.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
            assert!(cm_ready(&mut stream, &node, 1, qp).await.unwrap());
            if receives {
                for i in 0..64u64 {
                    let sge = Sge {
                        addr: ring.addr + i * 256,
                        len: 256,
                        lkey: ring.lkey,
                    };
                    node.post_recv(qp, RecvWr { wr_id: i, sge }).unwrap();
                }
            }
            cm_accepted(&mut stream, qp, 0).await.unwrap();
            let (r, w) = stream.into_split();
            node.attach(1, r, w, |_| {});
            let hello = Hello {
                config,
                region_addr: region.addr,
                region_len: region.len,
                region_rkey: region.rkey,
                rq_slots: 64,
                rq_slot_bytes: 256,
                seq_base: 1,
                ring_addr: 0,
                ring_rkey: None,
            };
            let frame = Payload::inline(Frame::Hello(hello).emit());
            node.post_send(qp, SendWr::new(0, Opcode::Send, frame, None))
                .unwrap();
            // Serve nothing more, for longer than any test waits.
            remora_exec::time::sleep(Duration::from_secs(120)).await;
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn an_append_the_server_never_completes_ends_with_an_error_naming_it() {
    for receives in [true, false] {
        let addr = silent_server(receives);
        let r = remotelog_against_within(
            &addr,
            3,
            &LatencyProfile::default_profile(),
            None,
            Duration::from_millis(300),
        );
        let Err(e) = r else {
            panic!("receives {receives}: an append completed against a silent server")
        };
        assert!(
            e.contains("append 0 (write-msg)") && e.contains("did not complete it within"),
            "receives {receives}: {e}"
        );
    }
}

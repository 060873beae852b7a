//! A SEND's length is known (its receive completion's byte count), so a library frame
//! followed by bytes it does not account for is malformed: the responder must not apply
//! such an Apply (nor acknowledge it), and a client must not take such a Hello or Ack.
//! Recovery, which reads whole receive slots without the message's length, still ignores
//! what follows a frame in its slot: a client that sends such an Apply can have it
//! replayed after a crash, into its own region only.

use remora::client::Client;
use remora::harness::SimPair;
use remora::responder::{CpuCosts, Responder, ServerSetup};
use remora::taxonomy::{Primitive, Shape};
use remora::wire::{Frame, Hello};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;

mod common;
use common::{drive, RawQp};

#[test]
fn the_responder_refuses_an_apply_with_bytes_after_its_frame() {
    let p = LatencyProfile::default_profile();
    let pair = SimPair::new(
        5,
        p.clone(),
        "MHP+DDIO+PM-RQWRB".parse::<ServerConfig>().unwrap(),
        ServerSetup::default(),
    );
    let mut responder =
        Responder::create(pair.server.clone(), pair.setup, CpuCosts::from_profile(&p)).unwrap();
    let region = responder.region();
    let raw = std::rc::Rc::new(RawQp::new(&pair.client));
    pair.sim
        .connect((&pair.client, raw.qp), (&pair.server, responder.qp()))
        .unwrap();
    pair.sim.spawn_on(&pair.server, async move {
        responder.serve().await;
    });
    let r = raw.clone();
    let seq = drive(&pair.sim, async move {
        let Ok(Frame::Hello(h)) = Frame::parse(&r.recv().await) else {
            panic!("no Hello");
        };
        h.seq_base
    });
    let apply = |byte: u8| Frame::Apply {
        seq,
        ack: true,
        entries: vec![(0, vec![byte; 8])],
    };
    // The frame, then four bytes it does not account for.
    let mut bad = apply(9).emit();
    bad.extend_from_slice(&[0xEE; 4]);
    raw.send(1, bad);
    pair.sim.run();
    assert_ne!(
        pair.server_read(region.addr, 8),
        vec![9u8; 8],
        "an Apply with bytes after its frame was applied"
    );
    assert_eq!(
        raw.try_recv(),
        None,
        "an Apply with bytes after its frame was acknowledged"
    );
    // The connection still serves the same sequence number, sent well-formed.
    raw.send(2, apply(7).emit());
    pair.sim.run();
    assert_eq!(pair.server_read(region.addr, 8), vec![7u8; 8]);
    assert_eq!(
        raw.try_recv().map(|b| Frame::parse(&b)),
        Some(Ok(Frame::Ack { seq }))
    );
}

#[test]
fn a_client_refuses_a_hello_with_bytes_after_its_frame() {
    let p = LatencyProfile::default_profile();
    let config: ServerConfig = "MHP+DDIO+PM-RQWRB".parse().unwrap();
    let pair = SimPair::new(5, p, config, ServerSetup::default());
    let mut client = Client::create(pair.client.clone()).unwrap();
    let raw = RawQp::new(&pair.server);
    pair.sim
        .connect((&pair.client, client.qp()), (&pair.server, raw.qp))
        .unwrap();
    let mut hello = Frame::Hello(Hello {
        config,
        region_addr: 1 << 40,
        region_len: 1 << 20,
        region_rkey: 1,
        rq_slots: 8,
        rq_slot_bytes: 256,
        seq_base: 1,
        ring_addr: 1 << 41,
        ring_rkey: Some(2),
    })
    .emit();
    hello.extend_from_slice(&[0xEE; 4]);
    raw.send(1, hello);
    let r = drive(&pair.sim, async move {
        client
            .connect(Primitive::Write, Shape::default())
            .await
            .map(|_| ())
    });
    assert!(
        matches!(r, Err(remora::PersistError::BadFrame(_))),
        "a Hello with four bytes after its frame: {r:?}"
    );
}

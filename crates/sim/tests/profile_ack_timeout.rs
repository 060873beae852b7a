//! A profile that `LatencyProfile::from_toml` accepts must let a correct persistence method
//! finish: the simulator's requester never retransmits, so a response later than
//! `rnic.ack_timeout_ns` fails its request (`RetryExcErr`), and the profile's validation
//! promises the time-out exceeds "the longest a FLUSH can wait on this profile's data path".
//! Either the profile is refused naming `rnic.ack_timeout_ns`, or the one-line
//! WRITE + FLUSH below completes. And a message as large as seed 000 allows must not
//! outlast the time-out only because its placement is counted against it.

use remora_model::config::*;
use remora_model::profile::{LatencyProfile, ProfileError, DEFAULT_TOML};
use remora_model::time::Instant;
use remora_sim::Sim;
use remora_verbs::*;

/// A signaled FLUSH (persistence) of `len` bytes after an unsignaled WRITE of them to PM,
/// on a server of `cfg`: the FLUSH waits for the lines to reach the persistence domain.
fn write_flush(profile: LatencyProfile, cfg: &str, len: u64) -> WorkCompletion {
    let sim = Sim::new(1, profile);
    let cfg: ServerConfig = cfg.parse().unwrap();
    let server = sim.add_node("server", cfg);
    let client = sim.add_node("client", cfg);
    let spd = server.alloc_pd().unwrap();
    let size = len.next_multiple_of(4096);
    let base = server.alloc(Space::Pm, size, 4096);
    let mr = server
        .reg_mr(spd, Space::Pm, base, size, Access::ALL)
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

/// One line, on DMP without DDIO: the FLUSH waits for the line's way to the WPQ.
fn line_write_flush(profile: LatencyProfile) -> WorkCompletion {
    write_flush(profile, "DMP+noDDIO+PM-RQWRB", 64)
}

fn refused_or_flushes(text: &str) {
    match LatencyProfile::from_toml(text) {
        Err(ProfileError::Invalid { field, .. }) => assert_eq!(field, "rnic.ack_timeout_ns"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(p) => {
            let wc = line_write_flush(p);
            assert_eq!(
                (wc.wr_id, wc.status),
                (2, WcStatus::Success),
                "a profile the validation accepted fails a one-line WRITE + FLUSH"
            );
        }
    }
}

#[test]
fn a_translation_miss_longer_than_the_ack_time_out_is_refused() {
    // Every inbound DMA misses the translation cache and waits 2 ms; the time-out is the
    // default's 1 ms. The validation's sum left the miss out.
    let t = DEFAULT_TOML
        .replace("translation_miss_every = 16", "translation_miss_every = 1")
        .replace("translation_miss_ns = 800", "translation_miss_ns = 2000000");
    refused_or_flushes(&t);
}

#[test]
fn the_shipped_profiles_still_flush() {
    for name in ["default", "cx4-100g", "slow-data-path"] {
        let wc = line_write_flush(LatencyProfile::builtin(name).unwrap());
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success), "{name}");
    }
}

/// seed 000 §3.2: a singleton update is "1 - 2^31 bytes"; a WRITE of it followed by a
/// FLUSH is a correct method on DMP without DDIO (and on MHP/WSP). On the shipped default
/// profile it must complete, not fail its QP with RetryExcErr because the requester counts
/// the responder's PCIe DMA of the whole message (100 Gb/s, slower than the 200 Gb/s link)
/// against the 1 ms ACK time-out of an MTU packet.
#[test]
fn a_16_mib_write_and_flush_completes_on_the_default_profile() {
    for cfg in ["DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB"] {
        for len in [8 << 20, 16 << 20] {
            let wc = write_flush(LatencyProfile::default_profile(), cfg, len);
            assert_eq!(
                (wc.wr_id, wc.status),
                (2, WcStatus::Success),
                "{cfg}, {len}-byte WRITE + FLUSH"
            );
        }
    }
}

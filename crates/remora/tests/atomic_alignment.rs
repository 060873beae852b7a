//! The compound WRITE method of DMP without DDIO (`write-flush-atomic-flush`, seed 000
//! Table 3) carries `b` in an ATOMIC WRITE, which the RNIC executes only on one aligned
//! 8-byte word. An 8-byte `b` at an offset that is not a multiple of 8 cannot be carried:
//! the client must refuse it before posting anything, as it refuses a `b` of another
//! length, and not write `a`, fail the connection and blame a FLUSH.

use remora::client::PersistError;
use remora::harness::SimPair;
use remora::responder::ServerSetup;
use remora::taxonomy::{Primitive, Shape, Update};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;

#[test]
fn an_atomic_write_to_an_unaligned_b_is_refused_before_anything_is_written() {
    for name in ["DMP+noDDIO+DRAM-RQWRB", "DMP+noDDIO+PM-RQWRB"] {
        let config: ServerConfig = name.parse().unwrap();
        let setup = ServerSetup {
            region_len: 4096,
            ..ServerSetup::default()
        };
        let pair = SimPair::new(7, LatencyProfile::default_profile(), config, setup);
        let (mut client, region) = pair.open().unwrap();
        let (first, then) = pair
            .sim
            .block_on(Instant::NEVER, async move {
                client
                    .connect(Primitive::Write, Shape::default())
                    .await
                    .unwrap();
                assert_eq!(
                    client.method(Update::Compound).unwrap().name,
                    "write-flush-atomic-flush"
                );
                // An 8-byte tail pointer at offset 4.
                let first = client
                    .persist_ordered((64, &[0x44; 64]), (4, &[0x55; 8]))
                    .await;
                // The connection still serves a suitable update.
                let then = client
                    .persist_ordered((128, &[0x66; 64]), (8, &[0x77; 8]))
                    .await;
                (first, then)
            })
            .unwrap();
        assert!(
            matches!(&first, Err(PersistError::Unsuitable { method, .. }) if method == "write-flush-atomic-flush"),
            "{name}: {first:?}"
        );
        assert_eq!(
            pair.server_read(region.addr + 64, 64),
            vec![0u8; 64],
            "{name}: a refused update wrote a"
        );
        assert_eq!(then, Ok(()), "{name}: the connection did not survive");
        assert_eq!(pair.server_read(region.addr + 128, 64), vec![0x66; 64]);
        assert_eq!(pair.server_read(region.addr + 8, 8), vec![0x77; 8]);
    }
}

//! The real crash loop's check of a compound log on a reused ring (`ring-reuse/…`), when
//! `serve --gc`'s collector has run before the returning client reads its region: the
//! collector starts as soon as the client is accepted, trusts the tail pointer, and moves
//! the head up to it, over a record that did not survive. A check of the tail pointer from
//! that head covers nothing (it let a method that persists the tail pointer before its
//! record pass, in most of the lives that caught it).

mod common;
use remora::{Primitive, Shape, Update};
use remora_cli::real::{return_violation, LogCollector};
use remora_model::profile::LatencyProfile;
use remora_remotelog::check::log_violation;
use remora_remotelog::log::{read_records, record, recover, LogShape, HEAD_OFF, TAIL_OFF};

#[test]
fn a_tail_pointer_past_a_lost_record_is_caught_after_the_collector_moved_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let shape = LogShape {
        capacity: 4,
        gc_interval: remora_model::time::Duration::from_micros(100),
        ..LogShape::default()
    };
    let collector = LogCollector {
        update: Update::Compound,
        shape,
        head_visible_first: false,
    };
    let addr = common::serve_collecting(
        dir.path(),
        "DMP+noDDIO+DRAM-RQWRB",
        shape.region_len(),
        8 << 20,
        collector,
    );
    remora_exec::block_on(async {
        let profile = LatencyProfile::default_profile();
        let (_node, _, mut client) = remora_soft::client::connect(&addr, &profile).await.unwrap();
        client
            .connect(Primitive::Write, Shape::default())
            .await
            .unwrap();
        // What a SIGKILL leaves of a compound log whose method let the tail pointer persist
        // before its record (one FLUSH after both WRITEs): records 0 and 1 acknowledged,
        // record 2 begun (unacknowledged) and lost, the tail pointer at 3.
        for i in 0..2 {
            let r = record(i, shape.record_bytes);
            client.persist(shape.slot(i), &r).await.unwrap();
        }
        client.persist(TAIL_OFF, &3u64.to_le_bytes()).await.unwrap();
        let (acked, started) = ([0u64, 1], 3u64);
        // The collector takes the log up to the tail pointer as applied.
        let mut head = 0;
        for _ in 0..2000 {
            let h = client.read(HEAD_OFF, 8).await.unwrap();
            head = u64::from_le_bytes(h[..8].try_into().unwrap());
            if head == 3 {
                break;
            }
            remora_exec::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(head, 3, "the collector did not run");
        // The client's check after the restart, as the real loop does it.
        let image = read_records(&mut client, &shape, shape.capacity)
            .await
            .unwrap();
        let read = |off: u64, len: u64| image[off as usize..(off + len) as usize].to_vec();
        let rec = recover(read, &shape, Update::Compound);
        assert_eq!((rec.head, rec.tail_pointer), (3, 3), "{rec:?}");
        // Judged from the head the collector moved, the lost record is not seen.
        assert_eq!(
            log_violation(&read, &shape, Update::Compound, &rec, &acked),
            None
        );
        let v = return_violation(&read, &shape, Update::Compound, &rec, &acked, started);
        assert!(
            v.as_deref()
                .is_some_and(|v| v.contains("points past record 2")),
            "{v:?}"
        );
    });
}

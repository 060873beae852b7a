//! `serve --gc`'s collector against a client that rewrites its log's durable head.

mod common;
use remora::{Primitive, Shape, Update};
use remora_cli::real::{shape_for, LogCollector};
use remora_model::profile::LatencyProfile;
use remora_remotelog::log::{record, HEAD_DURABLE_OFF};
use std::time::{Duration, Instant};

#[test]
fn a_client_rewriting_its_head_does_not_stall_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let region: u64 = 16 << 20;
    let shape = shape_for(region);
    let collector = LogCollector {
        update: Update::Singleton,
        shape,
        head_visible_first: false,
    };
    let addr = common::serve_collecting(
        dir.path(),
        "MHP+noDDIO+PM-RQWRB",
        region,
        64 << 20,
        collector,
    );
    remora_exec::block_on(async {
        let profile = LatencyProfile::default_profile();
        let (_hn, _, mut hostile) = remora_soft::client::connect(&addr, &profile).await.unwrap();
        hostile
            .connect(Primitive::Write, Shape::default())
            .await
            .unwrap();
        let (_on, _, mut other) = remora_soft::client::connect(&addr, &profile).await.unwrap();
        other
            .connect(Primitive::Write, Shape::default())
            .await
            .unwrap();
        // Fill the ring with valid records, 64 at a time.
        let mut chunk = vec![0u8; 4096];
        for c in 0..shape.capacity.div_ceil(64) {
            let n = (shape.capacity - c * 64).min(64);
            for k in 0..n {
                let i = c * 64 + k;
                chunk[(k * 64) as usize..((k + 1) * 64) as usize].copy_from_slice(&record(i, 64));
            }
            hostile
                .persist(shape.slot(c * 64), &chunk[..(n * 64) as usize])
                .await
                .unwrap();
        }
        remora_exec::time::sleep(Duration::from_millis(200)).await;
        // The first client writes a word of its region again and again while the other
        // reads: a word the collector does not read, then its durable head, set back to 0.
        let mut counts = Vec::new();
        for (off, label) in [(24, "a word of the header"), (HEAD_DURABLE_OFF, "its head")] {
            let stop = std::rc::Rc::new(std::cell::Cell::new(false));
            let s = stop.clone();
            let writer = remora_exec::spawn_local(async move {
                while !s.get() {
                    hostile.persist(off, &0u64.to_le_bytes()).await.unwrap();
                }
                hostile
            });
            counts.push(reads_in_window(&mut other, label).await);
            stop.set(true);
            hostile = writer.await.unwrap();
        }
        let (calm, stormy) = (counts[0], counts[1]);
        assert!(
            stormy * 3 >= calm,
            "another client made {stormy} reads in {WINDOW:?} while one client rewrote its \
             head, {calm} while it rewrote another word"
        );
    });
}

/// How many reads `client` completes one after another in [`WINDOW`].
#[allow(clippy::disallowed_methods)] // a load test of a real-time server: wall-clock time
async fn reads_in_window(
    client: &mut remora::Client<remora_soft::runtime::RtNode>,
    label: &str,
) -> u64 {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < WINDOW {
        client.read(0, 8).await.unwrap();
        n += 1;
    }
    eprintln!("{label}: {n} reads in {WINDOW:?}");
    n
}

const WINDOW: Duration = Duration::from_millis(300);

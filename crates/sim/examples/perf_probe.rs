//! Quick probe of simulator speed: batches of unsignaled WRITEs + one FLUSH.
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::Sim;
use remora_verbs::*;

#[allow(clippy::disallowed_methods)] // wall clock measures the simulator itself
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2_000_000);
    let batch: u64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(64);
    let sim = Sim::new(1, LatencyProfile::default_profile());
    let cfg = ServerConfig::table1()[2];
    let server = sim.add_node("server", cfg);
    let client = sim.add_node("client", cfg);
    let spd = server.alloc_pd().unwrap();
    let base = server.alloc(Space::Pm, 1 << 20, 4096);
    let mr = server
        .reg_mr(spd, Space::Pm, base, 1 << 20, Access::ALL)
        .unwrap();
    let scq = server.create_cq(64).unwrap();
    let sqp = server.create_qp(spd, scq, scq, QpAttr::default()).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(64).unwrap();
    let cqp = client.create_qp(cpd, ccq, ccq, QpAttr::default()).unwrap();
    sim.connect((&client, cqp), (&server, sqp)).unwrap();
    let c = client.clone();
    let t0 = std::time::Instant::now();
    let ops = sim
        .block_on(Instant::NEVER, async move {
            let mut ops = 0u64;
            let mut i = 0u64;
            let rec = vec![7u8; 64];
            while i < n {
                for _ in 0..batch {
                    let off = (i % (1 << 14)) * 64;
                    c.post_send(
                        cqp,
                        SendWr::new(
                            i,
                            Opcode::Write,
                            Payload::Inline(rec.clone()),
                            Some(Remote {
                                addr: mr.addr + off,
                                rkey: mr.rkey,
                            }),
                        )
                        .signaled(false),
                    )
                    .unwrap();
                    i += 1;
                    ops += 1;
                }
                c.post_send(
                    cqp,
                    SendWr::new(
                        u64::MAX,
                        Opcode::Flush {
                            placement: FlushPlacement::Persistence,
                            len: 1 << 20,
                        },
                        Payload::None,
                        Some(Remote {
                            addr: mr.addr,
                            rkey: mr.rkey,
                        }),
                    ),
                )
                .unwrap();
                ops += 1;
                let wc = next_completion(&c, ccq).await;
                assert_eq!(wc.status, WcStatus::Success);
            }
            ops
        })
        .unwrap();
    let el = t0.elapsed().as_secs_f64();
    println!(
        "{ops} ops in {el:.3}s = {:.2} M ops/s, {} events, sim time {}",
        ops as f64 / el / 1e6,
        sim.events_processed(),
        sim.now()
    );
}

//! Why durable latency grows with concurrent senders (the results page's Figure 17
//! section): reruns `remora bench rpc --divisor 100`'s Figure 17 runs with one stage of the
//! data path made free in the profile, the same for every design, and prints each run's
//! mean, read and write latency and throughput.
//!
//! `cargo run --release -p remora-rpc --example fig17_probe -- VARIANT`, where VARIANT is
//! `base` or a comma-separated list of `pm` (PM writes free), `pcie`, `link`, `memcpy`,
//! `imc`.

use remora_model::profile::LatencyProfile;
use remora_rpc::bench::{senders, BenchOptions};
use remora_rpc::Design;

fn main() {
    let variant = std::env::args().nth(1).unwrap_or_default();
    let mut p = LatencyProfile::default_profile();
    for v in variant.split(',') {
        match v {
            "pcie" => p.rnic.pcie_gbps = 100_000,
            "link" => p.network.link_gbps = 100_000,
            "pm" => {
                p.pm.row_hit_ns = 1;
                p.pm.write_conflict_ns = 1;
                p.pm.wpq_entries = 1 << 20;
            }
            "memcpy" => p.cpu.memcpy_bytes_per_ns = 100_000,
            "imc" => {
                p.host.imc_ns = 1;
                p.host.imc_jitter_ns = 1;
            }
            _ => {}
        }
    }
    let o = BenchOptions {
        divisor: 100,
        profile: p,
        threads: 2,
        designs: Design::ALL.to_vec(),
        ..BenchOptions::full()
    };
    for r in senders(&o) {
        println!(
            "{variant:10} {:14} {} mean {:6.1} rd {:6.1} wr {:6.1} kops {:6.1} writes-GB/s {:5.2}",
            r.design,
            r.senders,
            r.mean_ns / 1e3,
            r.read_mean_ns / 1e3,
            r.write_mean_ns / 1e3,
            r.throughput_ops_s / 1e3,
            // Half the operations are Puts of 64 KB: object bytes written per second.
            r.throughput_ops_s * 0.5 * 65536.0 / 1e9
        );
    }
}

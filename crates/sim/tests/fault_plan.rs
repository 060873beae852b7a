//! Fault plans: every planned power failure lands, however the plan's crashes share an
//! instant or an event.

#[path = "common/mod.rs"]
mod common;

use common::*;
use remora_sim::{Crash, CrashAt, FaultPlan};

/// Both nodes planned to lose power just before the same event (a data-centre-wide
/// outage): both must, not only the first one listed.
#[test]
fn two_crashes_at_the_same_event_both_land() {
    for k in [0, 1, 3] {
        let p = Pair::new(1, cfg("DMP+noDDIO+PM-RQWRB"));
        p.sim.set_faults(&FaultPlan {
            crashes: vec![
                Crash {
                    node: p.server.id(),
                    at: CrashAt::Event(k),
                },
                Crash {
                    node: p.client.id(),
                    at: CrashAt::Event(k),
                },
            ],
        });
        p.post_all(
            (0..8)
                .map(|i| p.write(i, p.mr.addr + i * 64, vec![7; 64]))
                .collect(),
        );
        p.sim.run();
        let mut crashed: Vec<_> = p.sim.crashed().iter().map(|&(n, _)| n).collect();
        crashed.sort_unstable();
        assert_eq!(
            crashed,
            vec![p.server.id(), p.client.id()],
            "crashes planned at Event({k}) that landed"
        );
    }
}

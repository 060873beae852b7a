//! A power failure in the middle of a server's recovery stops the recovery there (its
//! task is the server's: `Sim::block_on_node`), and the next recovery finds what the
//! first had not finished. Run as a task of no node, as it was until a review found it, an
//! interrupted recovery ran on over the restarted memory and its later watermark became
//! durable while the data it copied was lost: a loss the system does not have.

use remora::harness::SimPair;
use remora::{ServerSetup, Shape};
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_remotelog::check::scenario_targets;
use remora_remotelog::log::{is_record, LogClient, LogShape};
use remora_sim::{CrashAt, FaultPlan};
use std::cell::RefCell;
use std::rc::Rc;

#[test]
fn a_power_failure_stops_recovery_and_the_next_recovery_finishes_it() {
    let t = scenario_targets()
        .into_iter()
        .find(|t| t.name == "singleton/DMP+noDDIO+PM-RQWRB/SEND")
        .unwrap();
    let shape = LogShape {
        capacity: 256,
        ..LogShape::default()
    };
    let setup = ServerSetup {
        region_len: shape.region_len(),
        ..ServerSetup::default()
    };
    let pair = SimPair::new(1, LatencyProfile::default_profile(), t.config, setup);
    pair.sim
        .set_faults(&FaultPlan::crash(pair.server.id(), CrashAt::Event(8)));
    let (client, region) = pair.open().unwrap();
    let acked = Rc::new(RefCell::new(Vec::new()));
    let a = acked.clone();
    pair.sim.spawn_on(&pair.client, async move {
        let mut c = client;
        c.connect(t.primitive, Shape::default()).await.unwrap();
        c.use_method(t.update, t.method.clone()).unwrap();
        let mut log = LogClient::new(c, shape, t.update);
        while let Ok(i) = log.append().await {
            a.borrow_mut().push(i);
        }
    });
    pair.sim.run();
    assert_eq!(
        *acked.borrow(),
        vec![0],
        "append 0 acknowledged (in the PM ring), then the crash"
    );
    // Power fails again 34 ns into the recovery (a clean one takes ~340 ns).
    let at = Instant::from_nanos(pair.sim.now().as_nanos() + 34);
    pair.sim
        .set_faults(&FaultPlan::crash(pair.server.id(), CrashAt::Time(at)));
    let first = pair.recover_server().map(|r| r.1);
    assert_eq!(
        pair.sim.crashed().len(),
        2,
        "the second power failure happened"
    );
    assert!(
        first.is_err(),
        "the recovery the power failure cut short: {first:?}"
    );
    let (_, second) = pair.recover_server().unwrap();
    let rec0 = pair.server_read(region.addr + shape.slot(0), 64);
    assert!(
        is_record(&rec0, 0),
        "interrupted recovery reported {first:?}; the next one {second:?}; record 0 is gone"
    );
}

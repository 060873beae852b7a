//! RemoteLog with the ring reused: a four-record ring, 24 appends, the server's garbage
//! collector freeing records as the client fills it, and a power failure at every event
//! of the run (and every 500 ns of it). After each, recovery must find every acknowledged
//! record the client had not begun to overwrite since (`crashcheck.rs`'s runs never fill
//! the ring, so they never read the head or reuse a slot). The collector also runs
//! descheduled for 20 µs between each store and its persist: under DMP a store is visible
//! at once and durable only after its persist, and a head the client could read before it
//! was durable let the client overwrite records a crash then needed (found by review).

use remora::harness::SimPair;
use remora::{PersistError, ServerSetup, Shape};
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_remotelog::check::{log_violation, scenario_targets, Target};
use remora_remotelog::log::{collect_garbage, recover, LogClient, LogShape};
use remora_sim::{CrashAt, FaultPlan};
use remora_verbs::Verbs;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const APPENDS: u64 = 24;

fn shape(gc_pause: Duration) -> LogShape {
    LogShape {
        capacity: 4,
        gc_interval: Duration::from_micros(1),
        gc_pause,
        ..LogShape::default()
    }
}

/// What one run came to.
struct Run {
    events: u64,
    end: Instant,
    /// A broken promise, in words.
    violation: Option<String>,
}

/// Runs `target` with the collector, a power failure at `crash` if any; then recovers and
/// judges.
fn run(target: &Target, shape: LogShape, crash: Option<CrashAt>) -> Run {
    let setup = ServerSetup {
        region_len: shape.region_len(),
        ..ServerSetup::default()
    };
    let pair = SimPair::new(1, LatencyProfile::default_profile(), target.config, setup);
    if let Some(at) = crash {
        pair.sim.set_faults(&FaultPlan::crash(pair.server.id(), at));
    }
    let (client, region) = pair.open().unwrap();
    let update = target.update;
    let running = Rc::new(Cell::new(true));
    let r = running.clone();
    pair.sim.spawn_on(
        &pair.server,
        collect_garbage(pair.server.clone(), region.addr, shape, update, move || {
            r.get()
        }),
    );
    let acked = Rc::new(RefCell::new(Vec::new()));
    // One past the highest record the client has begun to write.
    let started = Rc::new(Cell::new(0u64));
    let (a, s, node) = (acked.clone(), started.clone(), pair.client.clone());
    let (method, flush, primitive) = (target.method.clone(), target.flush, target.primitive);
    pair.sim.spawn_on(&pair.client, async move {
        let mut client = client;
        if client.connect(primitive, Shape::default()).await.is_ok() {
            client.use_method(update, method);
            client.use_flush_method(flush);
            let mut log = LogClient::new(client, shape, update);
            let mut full = 0;
            while log.next_index() < APPENDS {
                s.set(log.next_index() + 1);
                match log.append().await {
                    Ok(i) => a.borrow_mut().push(i),
                    // The ring is full: wait for the collector.
                    Err(PersistError::Protocol(_)) if full < 1000 => {
                        full += 1;
                        node.compute(Duration::from_micros(1)).await;
                    }
                    Err(_) => break,
                }
            }
        }
        running.set(false);
    });
    let events = pair.sim.run();
    let end = pair.client.now();
    if pair.sim.crashed().is_empty() {
        let n = acked.borrow().len() as u64;
        let violation =
            (n != APPENDS).then(|| format!("no crash, yet {n} of {APPENDS} appends completed"));
        return Run {
            events,
            end,
            violation,
        };
    }
    pair.recover_server().unwrap();
    let read = |off: u64, len: u64| pair.server_read(region.addr + off, len as usize);
    let rec = recover(read, &shape, update);
    let kept: Vec<u64> = acked
        .borrow()
        .iter()
        .copied()
        .filter(|&i| i + shape.capacity >= started.get())
        .collect();
    let mut violation = log_violation(&read, &shape, update, &rec, &kept).map(|v| v.describe(&rec));
    if violation.is_none() && rec.head > rec.tail {
        violation = Some(format!("head {} is past the tail {}", rec.head, rec.tail));
    }
    Run {
        events,
        end,
        violation,
    }
}

/// Every crash point of `target`'s run: the first violation, if any, and how many runs.
fn sweep(target: &Target, shape: LogShape) -> (Option<String>, u64) {
    let dry = run(target, shape, None);
    if let Some(v) = dry.violation {
        return (Some(format!("without a crash: {v}")), 1);
    }
    let mut runs = 1;
    let at_events = (0..dry.events).map(CrashAt::Event);
    let at_times = (0..dry.end.as_nanos())
        .step_by(500)
        .map(|t| CrashAt::Time(Instant::from_nanos(t)));
    for at in at_events.chain(at_times) {
        runs += 1;
        if let Some(v) = run(target, shape, Some(at)).violation {
            return (Some(format!("power failure at {at:?}: {v}")), runs);
        }
    }
    (None, runs)
}

fn check(filter: impl Fn(&Target) -> bool, gc_pause: Duration) {
    let mut failed = Vec::new();
    let mut runs = 0;
    for t in scenario_targets().into_iter().filter(|t| filter(t)) {
        let (v, n) = sweep(&t, shape(gc_pause));
        runs += n;
        if let Some(v) = v {
            failed.push(format!("{} ({}): {v}", t.name, t.method.name));
        }
    }
    assert!(runs > 100, "{runs} runs");
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Every scenario whose server has a PM persistence domain the collector can be caught in
/// between: DMP, where a CPU store is visible before it is durable.
#[test]
fn a_reused_ring_keeps_every_acknowledged_append_with_a_descheduled_collector() {
    check(
        |t| t.name.contains("DMP+noDDIO+PM-RQWRB") || t.name.contains("DMP+DDIO+DRAM-RQWRB"),
        Duration::from_micros(20),
    );
}

/// The other servers, the collector never descheduled.
#[test]
fn a_reused_ring_keeps_every_acknowledged_append_on_every_other_server() {
    check(
        |t| !t.name.contains("DMP+noDDIO+PM-RQWRB") && !t.name.contains("DMP+DDIO+DRAM-RQWRB"),
        Duration::ZERO,
    );
}

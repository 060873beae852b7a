//! What the failure-recovery model (§5.4) needs from a durable RPC beyond its read and
//! write latencies: the time the restarted service takes to re-execute one logged request,
//! measured on the simulator with the durable RPC's own recovery code.
//!
//! [`measure_replay`] fills a connection's redo log with Puts the server has not
//! processed yet (its processing is made slow for this), cuts the server's power, restarts
//! it and times [`DurableServer::recover`](crate::durable::DurableServer::recover): every
//! committed entry is executed into the object store and the processed watermark
//! persisted. The replay cost per entry is the simulated recovery time divided by the
//! entries it re-executed.

use crate::api::{Op, RpcClient, ServerCosts};
use crate::design::{Design, FlushForm};
use crate::durable::{DurableOptions, DurablePair};
use crate::flush::FlushParams;
use crate::workload::value_for;
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use serde::Serialize;

/// Logged Puts the measurement re-executes.
pub const REPLAY_ENTRIES: u64 = 48;

/// One replay measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayResult {
    /// Design name.
    pub design: String,
    /// "emulated" or "native".
    pub flush: String,
    /// Object size of the logged Puts.
    pub object_bytes: u64,
    /// Entries recovery re-executed.
    pub reexecuted: u64,
    /// Simulated time recovery took, ns.
    pub recover_ns: u64,
    /// Per re-executed entry, ns.
    pub replay_ns: f64,
    /// Why it was not measured.
    pub skipped: Option<String>,
}

/// Measures the replay cost of `design` (see the module documentation).
pub fn measure_replay(
    design: Design,
    form: FlushForm,
    object_bytes: u64,
    profile: &LatencyProfile,
    config: ServerConfig,
    seed: u64,
) -> ReplayResult {
    let mut r = ReplayResult {
        design: design.name().into(),
        flush: super::flush_name(form).into(),
        object_bytes,
        reexecuted: 0,
        recover_ns: 0,
        replay_ns: f64::NAN,
        skipped: None,
    };
    match replay(design, form, object_bytes, profile, config, seed) {
        Ok((n, ns)) => {
            r.reexecuted = n;
            r.recover_ns = ns;
            r.replay_ns = ns as f64 / n.max(1) as f64;
        }
        Err(e) => r.skipped = Some(e),
    }
    r
}

fn replay(
    design: Design,
    form: FlushForm,
    object_bytes: u64,
    profile: &LatencyProfile,
    config: ServerConfig,
    seed: u64,
) -> Result<(u64, u64), String> {
    let mut opts = DurableOptions::new(design);
    opts.flush = FlushParams {
        form,
        ..FlushParams::default()
    };
    opts.objects = REPLAY_ENTRIES;
    opts.max_value = u32::try_from(object_bytes).map_err(|e| e.to_string())?;
    opts.capacity = 64;
    // A server too slow to process anything before the crash: every Put stays logged.
    opts.costs = ServerCosts {
        processing: Duration::from_millis(10),
        backlog_threshold: 64,
        workers: 1,
    };
    let pair = DurablePair::new(seed, profile.clone(), config, opts);
    let mut client = pair.open().map_err(|e| e.to_string())?;
    let logged = pair
        .sim
        .block_on(Instant::NEVER, async move {
            for k in 0..REPLAY_ENTRIES {
                let value = value_for(k, 1, object_bytes);
                client.call(Op::Put { key: k, value }).await?;
            }
            Ok::<_, crate::api::RpcError>(())
        })
        .ok_or("the client stalled")?;
    logged.map_err(|e| e.to_string())?;
    pair.sim.crash_now(pair.server.id());
    let t0 = pair.sim.now();
    let (_server, report) = pair.recover_server().map_err(|e| e.to_string())?;
    let ns = pair.sim.now().saturating_since(t0).as_nanos();
    // Free the simulation (tasks hold its nodes).
    pair.sim.crash_now(pair.server.id());
    pair.sim.crash_now(pair.client.id());
    if let Some(why) = report.torn {
        return Err(format!("recovery found a torn entry: {why}"));
    }
    if report.reexecuted == 0 {
        return Err("recovery found nothing to re-execute".into());
    }
    Ok((report.reexecuted, ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::dmp;

    fn spec(design: Design, flush: FlushForm, senders: u32) -> super::super::RunSpec {
        use crate::workload::{MicroSpec, Workload};
        super::super::RunSpec {
            experiment: "test",
            design,
            workload: Workload::Micro(MicroSpec {
                objects: 64,
                operations: 30,
                object_bytes: 512,
                ..MicroSpec::default()
            }),
            senders,
            batch: 1,
            load: super::super::Load::Light,
            heavy_processing: super::super::HEAVY_PROCESSING,
            server_threads: super::super::SERVER_THREADS,
            flush,
            server_config: dmp(false),
            seed: 5,
            profile: LatencyProfile::default_profile(),
            conditions: Default::default(),
            breakdown: false,
        }
    }

    #[test]
    fn durable_designs_run_and_native_forms_the_model_lacks_are_unsupported() {
        use super::super::run;
        for d in Design::DURABLE {
            for senders in [1, 3] {
                let r = run(&spec(d, FlushForm::Emulated, senders), None).unwrap();
                assert!(r.skipped.is_none(), "{r:?}");
                assert_eq!(r.ops, 30 * senders as u64, "{r:?}");
                assert!(r.reads_checked > 0, "{r:?}");
                assert_eq!(r.flush.as_deref(), Some("emulated"));
                // Same seed, same run.
                assert_eq!(
                    run(&spec(d, FlushForm::Emulated, senders), None).unwrap(),
                    r
                );
            }
            let n = run(&spec(d, FlushForm::Native, 1), None).unwrap();
            match crate::flush::FlushPlan::new(
                d,
                FlushParams {
                    form: FlushForm::Native,
                    ..FlushParams::default()
                },
                &dmp(false),
            ) {
                Ok(_) => assert!(n.skipped.is_none() && n.ops == 30, "{n:?}"),
                Err(_) => assert!(
                    n.skipped
                        .as_deref()
                        .is_some_and(|w| w.starts_with("unsupported")),
                    "{n:?}"
                ),
            }
        }
    }

    #[test]
    fn batching_uses_one_flush_per_batch() {
        use super::super::run;
        for d in [Design::WFlushRpc, Design::SRFlushRpc] {
            let one = run(&spec(d, FlushForm::Emulated, 1), None).unwrap();
            let mut s = spec(d, FlushForm::Emulated, 1);
            s.batch = 4;
            let four = run(&s, None).unwrap();
            assert!(four.skipped.is_none() && four.ops == 30, "{four:?}");
            assert!(four.rpcs < one.rpcs, "{four:?}");
            assert!(
                four.events < one.events,
                "{d}: {} vs {}",
                four.events,
                one.events
            );
        }
    }

    #[test]
    fn replay_is_measured_for_every_durable_design() {
        for d in Design::DURABLE {
            let r = measure_replay(
                d,
                FlushForm::Emulated,
                1024,
                &LatencyProfile::default_profile(),
                dmp(false),
                1,
            );
            assert!(r.skipped.is_none(), "{r:?}");
            assert!(r.reexecuted >= REPLAY_ENTRIES - 1, "{r:?}");
            assert!(r.replay_ns > 0.0, "{r:?}");
        }
    }
}

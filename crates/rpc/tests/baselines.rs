//! The eight baselines of seed 003 Figure 2 on the simulator: correct results, persistence
//! before the reply, FaSST's MTU, determinism, and the workload generators.

use remora_model::time::Instant;
use remora_rpc::baselines::{transport_substituted, BASELINES};
use remora_rpc::harness::{BaselineDeployment, Deployment, SimEnv, SimSetup};
use remora_rpc::workload::{check_value, value_for};
use remora_rpc::{Design, Op, RpcClient};

fn env(design: Design, seed: u64, objects: u64, max_value: u64) -> (SimEnv, BaselineDeployment) {
    let setup = SimSetup::new(seed, objects, max_value);
    let env = SimEnv::new(setup);
    let dep = BaselineDeployment::new(design, &env.setup);
    (env, dep)
}

#[test]
fn every_baseline_reads_what_it_wrote() {
    for design in BASELINES {
        let (env, dep) = env(design, 1, 16, 1024);
        env.preload(0..16, 64);
        let mut clients = dep.deploy(&env).unwrap();
        let mut c = clients.pop().unwrap();
        let out = env.sim.block_on(Instant::NEVER, async move {
            let mut log = Vec::new();
            for round in 1..=3u64 {
                for key in [3u64, 7, 11] {
                    let value = value_for(key, round, 100 + key * 10);
                    let done = c.call(Op::Put { key, value }).await.unwrap();
                    assert!(done.durable_at.is_some());
                    let got = c.call(Op::Get { key }).await.unwrap();
                    log.push((key, round, got.reply.unwrap().value));
                }
            }
            let untouched = c.call(Op::Get { key: 5 }).await.unwrap();
            (log, untouched.reply.unwrap().value)
        });
        let (log, untouched) = out.unwrap_or_else(|| panic!("{design}: the run stalled"));
        for (key, round, got) in log {
            assert_eq!(
                check_value(key, 100 + key * 10, &got),
                Ok(round),
                "{design}"
            );
        }
        assert_eq!(check_value(5, 64, &untouched), Ok(0), "{design}");
        let stats = dep.server_stats().unwrap();
        assert_eq!(stats.requests, 19, "{design}: {stats:?}");
        assert_eq!(
            transport_substituted(design).is_some(),
            matches!(design, Design::Herd | Design::Fasst)
        );
    }
}

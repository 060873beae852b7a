//! A baseline server bounds a Scan by the agreed `max_scan`, as the durable servers do
//! (`durable_scan_bound.rs`): a Scan of more objects, from a client that does not keep to
//! the bound, is refused with `ScanTooLarge` before the server reads any object, and the
//! connection serves the next request. The server read and copied every object the Scan
//! named (here the whole store) before it found that the reply did not fit its reply
//! buffer, and then answered with a text in place of a reply, which the client could not
//! parse.

use remora_model::time::Instant;
use remora_rpc::baselines::BASELINES;
use remora_rpc::harness::{BaselineDeployment, Deployment, SimEnv, SimSetup};
use remora_rpc::workload::{check_value, value_for};
use remora_rpc::{Op, Reply, ReplyStatus, RpcClient};

const OBJECTS: u64 = 16;
const VALUE: u64 = 256;

#[test]
fn a_scan_beyond_max_scan_is_refused_before_it_is_read() {
    for design in BASELINES {
        let env = SimEnv::new(SimSetup::new(7, OBJECTS, VALUE));
        let dep = BaselineDeployment::new(design, &env.setup);
        assert_eq!(dep.params.max_scan, 1);
        env.preload(0..OBJECTS, VALUE);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        c.exceed_scan_bound();
        let got = env.sim.block_on(Instant::NEVER, async move {
            let whole = c
                .call(Op::Scan {
                    key: 0,
                    count: OBJECTS as u32,
                })
                .await;
            let one = c.call(Op::Scan { key: 0, count: 1 }).await;
            let get = c.call(Op::Get { key: 3 }).await;
            (whole, one, get)
        });
        let (whole, one, get) = got.unwrap_or_else(|| panic!("{design}: the run stalled"));
        let whole = whole.unwrap_or_else(|e| panic!("{design}: the whole-store Scan: {e}"));
        assert_eq!(
            whole.reply,
            Some(Reply::refused(1, ReplyStatus::ScanTooLarge)),
            "{design}"
        );
        let one = one.unwrap().reply.unwrap();
        assert_eq!(one, Reply::ok(2, value_for(0, 0, VALUE)), "{design}");
        let get = get.unwrap().reply.unwrap().value;
        assert_eq!(check_value(3, VALUE, &get), Ok(0), "{design}");
    }
}

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
use remora_rpc::{Op, Reply, ReplyStatus, RpcClient, RpcError};

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

/// The reply buffer holds `max_batch` Get replies or one full Scan, not a batch of full
/// Scans. A batch of two Scans, each within `max_scan`, was sent, run, and answered with a
/// text marked as a reply, which the client failed on as "bad magic". The client now
/// refuses such a batch before sending it; a client that sends it anyway is told why
/// (`Unsupported`), and either way the connection serves the next request.
#[test]
fn a_batch_whose_replies_outgrow_the_reply_buffer_is_refused_with_its_reason() {
    for design in BASELINES {
        let mut setup = SimSetup::new(7, OBJECTS, VALUE);
        (setup.max_batch, setup.max_scan) = (2, 2);
        let env = SimEnv::new(setup);
        let dep = BaselineDeployment::new(design, &env.setup);
        env.preload(0..OBJECTS, VALUE);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        let scans = || vec![Op::Scan { key: 0, count: 2 }, Op::Scan { key: 2, count: 2 }];
        let got = env.sim.block_on(Instant::NEVER, async move {
            let refused = c.call_batch(scans()).await;
            let fits = c
                .call_batch(vec![Op::Scan { key: 0, count: 1 }, Op::Get { key: 5 }])
                .await;
            c.exceed_scan_bound();
            let sent = c.call_batch(scans()).await;
            let after = c.call(Op::Get { key: 3 }).await;
            (refused, fits, sent, after)
        });
        let (refused, fits, sent, after) =
            got.unwrap_or_else(|| panic!("{design}: the run stalled"));
        for (what, r) in [("refused by the client", refused), ("sent", sent)] {
            match r {
                Err(RpcError::Unsupported { what: why, .. }) => {
                    assert!(why.contains("reply"), "{design}, {what}: {why}")
                }
                other => panic!("{design}, {what}: {other:?}"),
            }
        }
        let fits = fits.unwrap_or_else(|e| panic!("{design}: a batch that fits: {e}"));
        assert_eq!(fits.len(), 2, "{design}");
        let get = after.unwrap().reply.unwrap().value;
        assert_eq!(check_value(3, VALUE, &get), Ok(0), "{design}");
    }
}

//! The real crash loop's takeover targets (`remora crashcheck --real`, `takeover/...`, in
//! three configurations: `crate::real`'s `takeover_targets`):
//! clients come and go, one at a time, on a server with two slots and no lease, so each
//! new client takes over a slot another client left, which `serve` clears first. The
//! SIGKILLs land at random moments, in the middle of clears too. After each restart every
//! client that had a slot comes back with its key. Checked:
//! - a new client finds its region all zero (none of another client's bytes);
//! - a returning client that gets its slot back finds the marks it made durable (a crash
//!   in the middle of a clear must not hand it back a cleared region);
//!
//! and a returning client refused as no longer the owner is fine (its slot went to a new
//! client), while a new client refused while the server lives is not (a slot is always
//! free to take over). Negative controls: a server that does not clear (`serve --fault no-clear`),
//! caught at the first takeover, and one that clears with the old key left in place
//! (`--fault clear-in-place`), caught when a SIGKILL lands in a clear. They run with the
//! default latency profile whatever the run's (see [`takeover_crash`]).

use crate::killloop::{life_ms, runtime, KillArgs};
use crate::real::{start_server, RealCrashReport, RealTarget};
use remora::{Primitive, Shape};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_soft::client::ConnectError;
use remora_soft::cm::RefuseCode;
use std::path::Path;

/// A client's region: large enough that clearing it takes a good share of a server's life
/// (milliseconds: the pool file's pages written and synced), small enough for several
/// clients a life.
pub const REGION: u64 = 2 << 20;
/// Where a client puts its marks: at the start, in the middle and at the end of its region.
const MARKS: [u64; 3] = [0, REGION / 2, REGION - 64];

/// A client that was given a slot.
struct Tenant {
    /// Its number (its marks hold it; never 0, so a mark is never zero bytes).
    id: u64,
    key: u64,
    /// Whether all its marks were acknowledged durable.
    acked: bool,
}

/// Client `id`'s mark: its number, eight times.
fn mark(id: u64) -> [u8; 64] {
    let mut m = [0u8; 64];
    for w in m.chunks_exact_mut(8) {
        w.copy_from_slice(&id.to_le_bytes());
    }
    m
}

/// What the 64 bytes at a mark's place hold, for a verdict.
fn describe(found: &[u8]) -> String {
    match u64::from_le_bytes(found[..8].try_into().expect("64 bytes")) {
        0 if found.iter().all(|&b| b == 0) => "zeros".into(),
        n if found[..] == mark(n)[..] => format!("client {n}'s mark"),
        _ => "other bytes".into(),
    }
}

/// Why a [`visit`] ended without its bytes.
enum VisitError {
    /// The server refused the connection.
    Refused(RefuseCode, String),
    /// Anything else (the server is gone).
    Failed(String),
}

/// Connects as `key` (0: a new client) and reads the bytes at every mark's place.
async fn visit(
    addr: &str,
    profile: &LatencyProfile,
    key: u64,
) -> Result<(remora_soft::client::Connection, Vec<Vec<u8>>), VisitError> {
    let mut c = match remora_soft::client::connect_as(addr, profile, key).await {
        Ok(c) => c,
        Err(e @ ConnectError::Refused { code, .. }) => {
            return Err(VisitError::Refused(code, e.to_string()))
        }
        Err(e) => return Err(VisitError::Failed(e.to_string())),
    };
    let mut found = Vec::new();
    let read = async {
        c.client.connect(Primitive::Write, Shape::default()).await?;
        for off in MARKS {
            found.push(c.client.read(off, 64).await?);
        }
        Ok::<_, remora::PersistError>(())
    };
    match read.await {
        Ok(()) => Ok((c, found)),
        Err(e) => {
            c.node.close();
            Err(VisitError::Failed(e.to_string()))
        }
    }
}

/// Runs the takeover loop on `real` (a takeover target), the `index`th target of the run.
pub fn takeover_crash(
    real: &RealTarget,
    args: &KillArgs,
    exe: &Path,
    index: u64,
) -> Result<RealCrashReport, String> {
    let target = &real.t;
    // The default profile, whatever the run's: what a takeover risks is the server's CPU
    // work (the clear), not the data path's timing, and a slowed data path (the
    // `slow-data-path` profile the RemoteLog controls need) would only leave the clients
    // too slow to make their marks durable within a life.
    let args = &KillArgs {
        profile: LatencyProfile::default_profile(),
        profile_arg: "default".into(),
        ..args.clone()
    };
    let pool = args.dir.join(format!("pool-{index}.pm"));
    let _ = std::fs::remove_file(&pool);
    // Two slots: a region, its receive ring and its key fit in 1 MiB more each.
    let pool_bytes = 2 * (REGION + (1 << 20));
    let mut rng = Prng::from_seed(args.seed ^ index);
    let mut report = RealCrashReport::new(target);
    let mut tenants: Vec<Tenant> = Vec::new();
    let mut next_id = 1u64;
    for life in 0..=args.kills {
        let mut server = start_server(
            exe,
            &pool,
            &target.config,
            REGION,
            pool_bytes,
            args,
            real.serve_fault,
            Some(0),
        )?;
        let rt = runtime()?;
        let (verdicts, acked, killed) = rt.block_on(async {
            let mut verdicts = Vec::new();
            // Every client with a slot comes back, one at a time.
            let mut kept = Vec::new();
            for t in std::mem::take(&mut tenants) {
                let found = match visit(&server.addr, &args.profile, t.key).await {
                    Ok((c, found)) => {
                        c.node.close();
                        found
                    }
                    // Its slot went to a new client (or was being cleared for one).
                    Err(VisitError::Refused(RefuseCode::NotOwner, _)) => continue,
                    Err(VisitError::Refused(_, e) | VisitError::Failed(e)) => {
                        return Err(format!("life {life}: client {} back: {e}", t.id))
                    }
                };
                let own = mark(t.id);
                for (off, f) in MARKS.iter().zip(&found) {
                    let fine = f[..] == own[..] || (!t.acked && f.iter().all(|&b| b == 0));
                    if !fine {
                        verdicts.push(format!(
                            "life {life}: client {} came back to its slot and found {} at \
                             offset {off}, not its acknowledged mark",
                            t.id,
                            describe(f)
                        ));
                    }
                }
                kept.push(t);
            }
            tenants = kept;
            if life == args.kills {
                return Ok::<_, String>((verdicts, 0, false));
            }
            // New clients, one after another, until the server dies; from the third on,
            // each takes over the slot the one before the last left.
            let killer = server.kill_after(life_ms(&mut rng, args.max_life_ms));
            let mut acked = 0;
            loop {
                let id = next_id;
                next_id += 1;
                let (mut c, found) = match visit(&server.addr, &args.profile, 0).await {
                    Ok(v) => v,
                    // One client at a time on two slots without a lease: a slot is always
                    // free to take over, so a refusal is the server's failure (a clear that
                    // could not finish, say), not the kill's.
                    Err(VisitError::Refused(_, e)) => {
                        verdicts.push(format!("life {life}: new client {id} refused: {e}"));
                        break;
                    }
                    Err(VisitError::Failed(_)) => break,
                };
                tenants.push(Tenant {
                    id,
                    key: c.key,
                    acked: false,
                });
                for (off, f) in MARKS.iter().zip(&found) {
                    if f.iter().any(|&b| b != 0) {
                        verdicts.push(format!(
                            "life {life}: new client {id} found {} at offset {off} of its region",
                            describe(f)
                        ));
                    }
                }
                let mut made = 0;
                for off in MARKS {
                    if c.client.persist(off, &mark(id)).await.is_err() {
                        break;
                    }
                    made += 1;
                }
                c.node.close();
                if made < MARKS.len() {
                    break;
                }
                tenants.last_mut().expect("just pushed").acked = true;
                acked += 1;
            }
            Ok((verdicts, acked, killer.join()))
        })?;
        drop(server);
        if let Some(first) = verdicts.first() {
            report.violations += 1;
            let more = match verdicts.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more findings in that life)"),
            };
            report.example.get_or_insert(format!("{first}{more}"));
        }
        report.kills += u64::from(killed);
        report.acked += acked;
        if report.violations > 0 && target.wrong {
            break;
        }
    }
    let _ = std::fs::remove_file(&pool);
    Ok(report)
}

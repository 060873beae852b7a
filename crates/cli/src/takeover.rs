//! The real crash loop's takeover targets (`remora crashcheck --real`, `takeover/...`, in
//! three configurations: `crate::real`'s `takeover_targets`): new clients come and go on a
//! server with no lease and one slot more than there are lanes of new clients
//! (`--clients`, one by default), so each new client takes over a slot another client
//! left, which `serve` clears first; with several lanes, two takeovers (and their clears)
//! run at once. The SIGKILLs land at random moments, in the middle of clears too. After
//! each restart the clients that had a slot come back with their keys, all at once and
//! among the life's new clients, so a slot one of them left may be being cleared for a new
//! client; in half the lives (drawn) they come back a few milliseconds late, and a quarter
//! of them (drawn) sit a life out, so slots go to new clients with their receive rings as
//! a SIGKILL left them. A new client makes its marks durable by WRITE or by SEND (drawn):
//! a SEND's mark waits in the slot's ring until the server applies it. In half the lives
//! before the last (drawn), one new client in four (drawn) gives up on its handshake after
//! up to 3 ms (some in the middle of their slot's clear), so the next new client may be
//! given a slot whose clear was done for a client that left. The last life has no
//! SIGKILL: every client comes back, then a new client per lane takes a slot over.
//! Checked:
//! - a new client finds its region all zero (none of another client's bytes, whether left
//!   in the region or applied from the ring);
//! - a returning client that gets its slot back finds every mark it had acknowledged (a
//!   crash in the middle of a clear must not hand it back a cleared region);
//!
//! and a returning client refused as no longer the owner is fine (its slot went to a new
//! client), while a new client refused while the server lives is not (the server waits
//! seconds for a slot to be given back, and clients keep one for milliseconds), nor is a
//! client's connection or mark that fails in the last life, which has no SIGKILL, nor, in
//! any life, a handshake that breaks the protocol's rules (a SIGKILL only ends it). Negative
//! controls: a server that does not clear (`serve --fault no-clear`), caught at the first
//! takeover; one that clears with the old key left in place (`--fault clear-in-place`),
//! caught when a SIGKILL lands in a clear; one that clears the region but not the ring
//! (`--fault keep-ring`), caught when a SIGKILL leaves a SEND's mark unapplied and a new
//! client takes the slot before its client is back (within 41 SIGKILLs over seeds 1-10;
//! not in about 750 clients' takeovers without one); one that stops a clear when its new
//! client leaves (`--fault abandon-clear`), caught when a client that gave up is followed
//! by a new client given that slot (within 30 SIGKILLs over seeds 1-10). They run with the
//! default latency profile whatever the run's (see [`takeover_crash`]).

use crate::killloop::{life_ms, runtime, KillArgs};
use crate::real::{start_server, RealCrashReport, RealTarget};
use remora::{Primitive, ServerSetup, Shape};
use remora_model::prng::{Prng, Ratio};
use remora_model::profile::LatencyProfile;
use remora_soft::client::ConnectError;
use remora_soft::cm::RefuseCode;
use remora_soft::server::pool_bytes_for;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

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
    /// How many of its marks (in [`MARKS`]' order, the order it makes them) were
    /// acknowledged durable.
    made: usize,
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
    /// The server broke the handshake's rules (a frame out of turn or malformed, a clear
    /// that did not progress, another key than the one claimed): its fault, not a kill's
    /// (a SIGKILL ends the connection, which is [`Failed`](VisitError::Failed)).
    Wrong(String),
    /// Anything else (the server is gone).
    Failed(String),
}

impl From<ConnectError> for VisitError {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Refused { code, .. } => VisitError::Refused(code, e.to_string()),
            ConnectError::Io { .. } | ConnectError::Lost { .. } | ConnectError::Timeout { .. } => {
                VisitError::Failed(e.to_string())
            }
            ConnectError::ClearStalled { .. }
            | ConnectError::Handshake { .. }
            | ConnectError::Protocol(_)
            | ConnectError::NodeId { .. }
            | ConnectError::WrongKey { .. }
            | ConnectError::Verbs(_) => VisitError::Wrong(e.to_string()),
        }
    }
}

/// Connects as `key` (0: a new client) to persist through `primitive`, and reads the bytes
/// at every mark's place.
async fn visit(
    addr: &str,
    profile: &LatencyProfile,
    key: u64,
    primitive: Primitive,
) -> Result<(remora_soft::client::Connection, Vec<Vec<u8>>), VisitError> {
    let mut c = remora_soft::client::connect_as(addr, profile, key).await?;
    let mut found = Vec::new();
    let read = async {
        c.client.connect(primitive, Shape::default()).await?;
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

/// What a returning client's visit came to.
enum Back {
    /// It got its slot back (checked); it keeps it.
    Kept(Tenant),
    /// Its slot went to a new client (or was being cleared for one).
    Gone,
}

/// Client `t` comes back with its key in life `life`, `delay` after the life began, and
/// checks its marks. `killable`: the server may be killed meanwhile, and a visit cut short
/// by that keeps the client for the next life unchecked; otherwise (the last life, no
/// SIGKILL) it is an error.
async fn come_back(
    addr: String,
    profile: LatencyProfile,
    t: Tenant,
    life: u64,
    killable: bool,
    delay: std::time::Duration,
) -> Result<(Back, Vec<String>), String> {
    remora_exec::time::sleep(delay).await;
    let found = match visit(&addr, &profile, t.key, Primitive::Write).await {
        Ok((c, found)) => {
            c.node.close();
            found
        }
        Err(VisitError::Refused(RefuseCode::NotOwner, _)) => return Ok((Back::Gone, Vec::new())),
        Err(VisitError::Failed(_)) if killable => return Ok((Back::Kept(t), Vec::new())),
        // The server's fault: a finding, and the client tries again next life.
        Err(VisitError::Wrong(e)) => {
            let finding = format!("life {life}: client {} back: {e}", t.id);
            return Ok((Back::Kept(t), vec![finding]));
        }
        Err(VisitError::Refused(_, e) | VisitError::Failed(e)) => {
            return Err(format!("life {life}: client {} back: {e}", t.id))
        }
    };
    let own = mark(t.id);
    let mut verdicts = Vec::new();
    for (k, (off, f)) in MARKS.iter().zip(&found).enumerate() {
        // A mark not acknowledged may have persisted, or not, or in part (a SIGKILL in the
        // middle of its copy into the pool file): each of its words the client's or zero.
        let fine = f[..] == own[..]
            || (k >= t.made
                && f.chunks_exact(8)
                    .all(|w| w == &own[..8] || w.iter().all(|&b| b == 0)));
        if !fine {
            verdicts.push(format!(
                "life {life}: client {} came back to its slot and found {} at offset {off}, \
                 not its acknowledged mark",
                t.id,
                describe(&f[..])
            ));
        }
    }
    Ok((Back::Kept(t), verdicts))
}

/// What one lane of new clients did in a life.
#[derive(Default)]
struct Lane {
    /// The clients it was given a slot for.
    tenants: Vec<Tenant>,
    verdicts: Vec<String>,
    /// New clients that left in the middle of their handshake ([`desert`]).
    left: u64,
}

/// Longest a [`desert`]ing client waits for its handshake to end, from its `Ready`: about
/// as long as a slot's clear (2 MiB, synced a MiB at a time) takes here, so some leave
/// before their slot is given, some during its clear, some once it is done.
const PATIENCE_US: u64 = 3_000;

/// A new client that gives up on its handshake after `patience` (its connection closed
/// then): in the middle of its slot's clear, when the server has one to do for it. The
/// server must still finish the clear before another new client gets the slot (and leave
/// it nobody's), or that client reads what is left of the old one's region. `Ok(true)`:
/// it left before it was accepted; `Ok(false)`: it was accepted first (and left at once,
/// with no mark made).
async fn desert(
    addr: &str,
    profile: &LatencyProfile,
    patience: std::time::Duration,
) -> Result<bool, VisitError> {
    let opening = remora_soft::client::open_as(addr, profile, None, 0, &[]).await?;
    let node = opening.node().clone();
    let lib = match remora::Client::create(node.clone()) {
        Ok(lib) => lib,
        Err(e) => {
            node.close();
            return Err(VisitError::Wrong(e.to_string()));
        }
    };
    let finished = remora_exec::time::timeout(patience, opening.finish_keyed(lib.qp())).await;
    // Either way its connection goes now: dropped with the handshake cut short, or closed.
    node.close();
    match finished {
        Err(_elapsed) => Ok(true),
        Ok(Ok(_accepted)) => Ok(false),
        Ok(Err(e)) => Err(e.into()),
    }
}

/// New clients, one after another, until the server dies or `limit` of them had their
/// turn (their numbers from `next_id`), each reading its region, then making its marks
/// durable through a primitive drawn from `rng`: WRITE, or SEND, whose marks wait in the
/// slot's receive ring until the server applies them (so a SIGKILL can leave them there
/// for the slot's next client to inherit if its clear missed the ring). `killable`: the
/// server may be killed meanwhile; otherwise (the last life) a client whose connection or
/// marks fail is a finding. `deserters`: one new client in four gives up on its handshake
/// ([`desert`]).
#[allow(clippy::too_many_arguments)] // one lane's whole brief; a struct would only rename it
async fn new_clients(
    addr: String,
    profile: LatencyProfile,
    next_id: Rc<Cell<u64>>,
    mut rng: Prng,
    life: u64,
    limit: Option<u64>,
    killable: bool,
    deserters: bool,
) -> Lane {
    let mut lane = Lane::default();
    for _ in 0..limit.unwrap_or(u64::MAX) {
        let id = next_id.get();
        next_id.set(id + 1);
        // A client that leaves while its slot is cleared must still leave the slot clean
        // for the next: the server finishes the clear for nobody.
        if deserters && rng.chance(Ratio::new(1, 4)) {
            let patience = std::time::Duration::from_micros(rng.range_inclusive(0, PATIENCE_US));
            match desert(&addr, &profile, patience).await {
                Ok(left) => lane.left += u64::from(left),
                Err(VisitError::Refused(_, e) | VisitError::Wrong(e)) => {
                    lane.verdicts
                        .push(format!("life {life}: new client {id} (leaving early): {e}"));
                    return lane;
                }
                Err(VisitError::Failed(_)) => return lane,
            }
            continue;
        }
        let primitive = if rng.chance(Ratio::new(1, 2)) {
            Primitive::Send
        } else {
            Primitive::Write
        };
        let (mut c, found) = match visit(&addr, &profile, 0, primitive).await {
            Ok(v) => v,
            // The server waits seconds for a slot to be given back, far longer than a life
            // and than any client keeps one: a refusal is the server's failure (a clear
            // that could not finish, say), not the kill's or the other clients'.
            Err(VisitError::Refused(_, e) | VisitError::Wrong(e)) => {
                lane.verdicts
                    .push(format!("life {life}: new client {id}: {e}"));
                return lane;
            }
            Err(VisitError::Failed(e)) => {
                if !killable {
                    lane.verdicts.push(format!(
                        "life {life}: new client {id} failed with no SIGKILL: {e}"
                    ));
                }
                return lane;
            }
        };
        lane.tenants.push(Tenant {
            id,
            key: c.key,
            made: 0,
        });
        for (off, f) in MARKS.iter().zip(&found) {
            if f.iter().any(|&b| b != 0) {
                lane.verdicts.push(format!(
                    "life {life}: new client {id} found {} at offset {off} of its region",
                    describe(f)
                ));
            }
        }
        let tenant = lane.tenants.last_mut().expect("just pushed");
        for off in MARKS {
            if c.client.persist(off, &mark(id)).await.is_err() {
                break;
            }
            tenant.made += 1;
        }
        c.node.close();
        if tenant.made < MARKS.len() {
            if !killable {
                lane.verdicts.push(format!(
                    "life {life}: new client {id} made {} of its {} marks durable with no \
                     SIGKILL",
                    tenant.made,
                    MARKS.len()
                ));
            }
            return lane;
        }
    }
    lane
}

/// Runs the takeover loop on `real` (a takeover target), the `index`th target of the run,
/// with `lanes` new clients at a time.
pub fn takeover_crash(
    real: &RealTarget,
    args: &KillArgs,
    exe: &Path,
    index: u64,
    lanes: u32,
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
    // A slot more than lanes, so new clients take over slots others left.
    let lanes = lanes.max(1);
    let setup = ServerSetup {
        region_len: REGION,
        ..ServerSetup::default()
    };
    let pool_bytes = pool_bytes_for(u64::from(lanes) + 1, &setup, target.config.rqwrb);
    let mut rng = Prng::from_seed(args.seed ^ index);
    let mut report = RealCrashReport::new(target);
    // The marks go by WRITE or by SEND, each by the library's method for it.
    let send = remora::Taxonomy::shipped()
        .method_for(
            &target.config,
            Primitive::Send,
            remora::Update::Singleton,
            Shape::default(),
        )
        .name
        .clone();
    report.method = format!("{} or {send}", report.method);
    let mut tenants: Vec<Tenant> = Vec::new();
    let next_id = Rc::new(Cell::new(1u64));
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
            None,
        )?;
        let rt = runtime()?;
        let last = life == args.kills;
        let (verdicts, acked, left, killed) = rt.block_on(async {
            let mut verdicts = Vec::new();
            // The SIGKILL's time is drawn first, so the clients coming back are in its
            // reach too; the last life has none.
            let killer = (!last).then(|| server.kill_after(life_ms(&mut rng, args.max_life_ms)));
            // New clients give up on their handshakes in half the lives (drawn), so the
            // other half keep every takeover's exposure to a SIGKILL (the `keep-ring`
            // control needs a SEND's mark left in a ring and a new client given that slot).
            let deserters = !last && rng.chance(Ratio::new(1, 2));
            let lanes_of = |rng: &mut Prng, limit: Option<u64>| -> Vec<_> {
                (0..lanes)
                    .map(|_| {
                        let lane_rng = Prng::from_seed(rng.next_u64());
                        let (addr, profile) = (server.addr.clone(), args.profile.clone());
                        let ids = next_id.clone();
                        remora_exec::spawn_local(new_clients(
                            addr, profile, ids, lane_rng, life, limit, !last, deserters,
                        ))
                    })
                    .collect()
            };
            // Before the last life, the new clients start first and the clients with a
            // slot come back among them, all at once: a slot one left may be being cleared
            // for a new client. In half the lives (drawn) they come back a few
            // milliseconds late, and a quarter of them (drawn) sit the life out, so a new
            // client may take over a slot whose receive ring still holds what a SIGKILL
            // left there. In the last life (no SIGKILL) they all come back first (so their
            // connections apply what their rings held), then a new client per lane takes a
            // slot over: a clear the last SIGKILL interrupted, or a region never cleared,
            // faces a new client too.
            let mut news = if last {
                Vec::new()
            } else {
                lanes_of(&mut rng, None)
            };
            let delay = match last || rng.chance(Ratio::new(1, 2)) {
                true => 0,
                false => rng.range_inclusive(1, 3),
            };
            let delay = std::time::Duration::from_millis(delay);
            let mut backs = Vec::new();
            for t in std::mem::take(&mut tenants) {
                if !last && rng.chance(Ratio::new(1, 4)) {
                    tenants.push(t);
                    continue;
                }
                let (addr, profile) = (server.addr.clone(), args.profile.clone());
                backs.push(remora_exec::spawn_local(come_back(
                    addr, profile, t, life, !last, delay,
                )));
            }
            for b in backs {
                let (back, found) = b
                    .await
                    .map_err(|e| format!("a returning client's task: {e:?}"))??;
                verdicts.extend(found);
                if let Back::Kept(t) = back {
                    tenants.push(t);
                }
            }
            if last {
                news = lanes_of(&mut rng, Some(1));
            }
            let (mut acked, mut left) = (0, 0);
            for n in news {
                let lane = n.await.map_err(|e| format!("a new client's task: {e:?}"))?;
                verdicts.extend(lane.verdicts);
                left += lane.left;
                // The clients that made all their marks durable.
                acked += lane
                    .tenants
                    .iter()
                    .filter(|t| t.made == MARKS.len())
                    .count() as u64;
                tenants.extend(lane.tenants);
            }
            Ok::<_, String>((verdicts, acked, left, killer.is_some_and(|k| k.join())))
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
        report.left += left;
        if report.violations > 0 && target.wrong {
            break;
        }
    }
    let _ = std::fs::remove_file(&pool);
    Ok(report)
}

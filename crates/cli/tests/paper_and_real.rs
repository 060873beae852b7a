//! The seed 000 commands and the soft RNIC, through the built `remora` binary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

mod common;
use common::{remora, scratch, text};

#[test]
fn taxonomy_prints_both_tables_cell_by_cell() {
    let out = remora(&["taxonomy"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("### Table 2") && s.contains("### Table 3"),
        "{s}"
    );
    // 4 rows per table, each with 9 cells.
    let rows: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("RQWRB |"))
        .collect();
    assert_eq!(rows.len(), 8);
    assert!(
        rows.iter().all(|r| r.matches(" | ").count() == 9),
        "{rows:?}"
    );
    assert!(s.contains("Rq Writeatomic(b)") && s.contains("Rq CompSend(a,b)"));
}

#[test]
fn plan_explains_its_choice_and_refuses_bad_input() {
    let out = remora(&[
        "plan",
        "--config",
        "WSP+noDDIO+PM-RQWRB@iwarp",
        "--update",
        "compound",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    // On iWARP a completion proves nothing: every candidate must FLUSH or exchange messages.
    assert!(s.contains("Chosen:") && !s.contains("write2-comp"), "{s}");
    let bad = remora(&[
        "plan",
        "--config",
        "WSP+noDDIO+PM-RQWRB",
        "--update",
        "triple",
    ]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("singleton or compound"));
}

#[test]
fn remotelog_quick_run_writes_its_outputs() {
    let scratch = scratch("rl-test");
    let dir = scratch.path();
    let page = dir.join("results.md");
    let out = remora(&[
        "remotelog",
        "--appends",
        "300",
        "--out",
        dir.to_str().unwrap(),
        "--results",
        page.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for f in [
        "remotelog.csv",
        "remotelog.json",
        "remotelog.svg",
        "figure2.md",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let csv = std::fs::read_to_string(dir.join("remotelog.csv")).unwrap();
    assert_eq!(csv.lines().count(), 73, "a header and 72 scenarios");
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(page.contains("The paper's claims beside the model's"));
}

/// A server on a pool file, killed when dropped.
struct Server(std::process::Child, String);

impl Server {
    fn start(pool: &std::path::Path, config: &str) -> Server {
        Server::start_with(pool, config, &[])
    }

    /// [`Server::start`] with more flags.
    fn start_with(pool: &std::path::Path, config: &str, flags: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_remora"));
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pool",
            pool.to_str().unwrap(),
            "--config",
            config,
        ])
        .args(flags);
        Server::spawn(cmd)
    }

    /// Starts a `serve` command (its stdout is taken here) and waits for it to listen.
    fn spawn(mut cmd: Command) -> Server {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .expect("listening line")
            .to_string();
        Server(child, addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn remotelog_runs_unchanged_against_a_soft_rnic_server() {
    let dir = scratch("serve-test");
    let pool = dir.path().join("pool.pm");
    let server = Server::start(&pool, "MHP+DDIO+PM-RQWRB");
    // A second server on the same pool (either protocol's) is refused, naming the first;
    // the first goes on serving (the RemoteLog run below).
    for cmd in [&["serve"][..], &["rpc-serve", "--design", "W-RFlush-RPC"]] {
        let pool = pool.to_str().unwrap();
        let config = ["--listen", "127.0.0.1:0", "--pool", pool];
        let out = remora(&[cmd, &config, &["--config", "MHP+DDIO+PM-RQWRB"]].concat());
        let cmd = cmd[0];
        assert!(!out.status.success(), "{cmd} on a pool in use");
        let err = text(&out.stderr);
        let holder = format!("in use by another process (pid {})", server.0.id());
        assert!(err.contains(&holder), "{cmd}: {err}");
    }
    let out = remora(&["remotelog", "--server", &server.1, "--appends", "50"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert_eq!(
        s.lines()
            .filter(|l| l.starts_with("| singleton") || l.starts_with("| compound"))
            .count(),
        6,
        "{s}"
    );
    assert!(
        s.contains("send-flush"),
        "a PM receive buffer makes SEND one-sided under MHP: {s}"
    );
    // --method runs only the scenarios of that method; a method the server's scenarios do
    // not run is an error naming the ones they do.
    let out = remotelog_method(&server.1, "send-flush");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("| singleton") || l.starts_with("| compound"))
        .map(str::to_string)
        .collect();
    assert!(
        rows.len() == 1 && rows[0].contains("| send-flush |"),
        "{rows:?}"
    );
    let out = remotelog_method(&server.1, "write-msg");
    assert!(!out.status.success(), "a method this server does not run");
    let err = text(&out.stderr);
    assert!(
        err.contains("no scenario runs method \"write-msg\"") && err.contains("send-flush"),
        "{err}"
    );
    drop(server);
    // The pool records the first server's layout: a restart whose receive ring would live
    // in DRAM (so its slots sit elsewhere in PM) is refused, naming both, and changes nothing.
    let before = std::fs::read(&pool).unwrap();
    let err = serve_refused(&pool, &["--config", "MHP+DDIO+DRAM-RQWRB"]);
    assert!(
        err.contains("laid out for") && err.contains("ring in PM") && err.contains("ring in DRAM"),
        "{err}"
    );
    assert!(
        std::fs::read(&pool).unwrap() == before,
        "a refused server changes nothing"
    );
    // A file that is not a pool is refused, and left alone.
    let foreign = pool.with_extension("txt");
    std::fs::write(&foreign, b"not a pool").unwrap();
    let err = serve_refused(&foreign, &["--config", "DMP+noDDIO+PM-RQWRB"]);
    assert!(err.contains("not a remora PM pool"), "{err}");
    assert_eq!(std::fs::read(&foreign).unwrap(), b"not a pool");
}

/// `remotelog --server ADDR --method METHOD`, 20 appends per scenario.
fn remotelog_method(addr: &str, method: &str) -> std::process::Output {
    remora(&[
        "remotelog",
        "--server",
        addr,
        "--appends",
        "20",
        "--method",
        method,
    ])
}

/// A server stops on SIGTERM with status 0 and says on stderr what it carried: how its
/// executor waited and its soft RNIC's counters (packets, socket writes, steps).
#[test]
fn serve_stops_on_sigterm_and_reports_what_it_carried() {
    let dir = scratch("serve-sigterm");
    let pool = dir.path().join("pool.pm");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_remora"));
    let pool_arg = pool.to_str().unwrap();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--pool", pool_arg])
        .args(["--config", "WSP+noDDIO+PM-RQWRB"])
        .stderr(Stdio::piped());
    let mut server = Server::spawn(cmd);
    let out = remotelog_method(&server.1, "write-comp");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // SAFETY: kill(2) on the server's pid, which this test started and has not reaped.
    assert_eq!(
        unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let mut err = String::new();
    std::io::Read::read_to_string(server.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    let status = server.0.wait().unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("executor waits: "), "{err}");
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("soft RNIC: "))
        .unwrap_or_else(|| panic!("no counters line: {err}"));
    let received: u64 = line.split(' ').next().unwrap().parse().unwrap();
    // 20 appends, each at least a WRITE in and an acknowledgement out, besides the handshake.
    assert!(received >= 20, "{line}");
    assert!(
        line.contains("0 malformed frames, 0 spoofed packets; 0 packets dropped"),
        "{line}"
    );
}

/// Runs `serve` on `pool` with `flags`, which must refuse to start; returns its stderr.
fn serve_refused(pool: &std::path::Path, flags: &[&str]) -> String {
    let pool = pool.to_str().unwrap();
    let out = remora(&[&["serve", "--listen", "127.0.0.1:0", "--pool", pool], flags].concat());
    assert!(
        !out.status.success(),
        "serve on {pool} with {flags:?} started"
    );
    text(&out.stderr)
}

#[test]
fn a_pool_keeps_its_size_and_a_larger_one_asked_for_is_refused() {
    let dir = scratch("size-test");
    let pool = dir.path().join("pool.pm");
    let small = (8u64 << 20).to_string();
    drop(Server::start_with(
        &pool,
        "DMP+noDDIO+PM-RQWRB",
        &["--pool-bytes", &small],
    ));
    // Given no size, the server serves the pool it finds (the default would be larger).
    let server = Server::start(&pool, "DMP+noDDIO+PM-RQWRB");
    let out = remora(&["remotelog", "--server", &server.1, "--appends", "20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    drop(server);
    assert_eq!(std::fs::metadata(&pool).unwrap().len(), 4096 + (8 << 20));
    // Asked for more explicitly, it refuses: a pool does not grow.
    let big = (16u64 << 20).to_string();
    let flags = ["--config", "DMP+noDDIO+PM-RQWRB", "--pool-bytes", &big];
    let err = serve_refused(&pool, &flags);
    assert!(
        err.contains(&format!("holds {small} bytes of PM, {big} asked for")),
        "{err}"
    );
}

#[test]
fn real_sigkill_loop_loses_no_acknowledged_append() {
    // A small loop for CI: every configuration's WRITE and WRITE-with-immediate singleton
    // and compound methods (`/WRITE` matches both), with a fresh ring and with one the server's collector frees for reuse (`ring-reuse/…`,
    // gone round twice before the first SIGKILL), 2 SIGKILLs each (the full run is `remora
    // crashcheck --real --targets correct`).
    let out = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "correct",
        "--kills",
        "2",
        "--only",
        "/WRITE",
    ]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let s = text(&out.stdout);
    assert!(s.contains("targets,") && !s.contains("FAIL"), "{s}");
    // Each reused ring went round: its first life alone acknowledges two rings' worth.
    let reused: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("| ring-reuse/"))
        .collect();
    assert_eq!(reused.len(), 48, "{s}");
    for row in reused {
        let acked: u64 = row.split('|').nth(5).unwrap().trim().parse().unwrap();
        assert!(acked >= 2 * remora_cli::real::REAL_RING, "{row}");
    }
}

#[test]
fn several_clients_come_back_to_their_own_logs_after_each_sigkill() {
    // Three clients append at once; after each restart they come back in a random order,
    // each by its key, and each checks its own appends and its region's mark (six scenarios,
    // with a fresh ring and with one reused, the mark beside it). The negative
    // control (a server giving slots by connection order, as serve did before keys) is
    // caught.
    let correct = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "correct",
        "--clients",
        "3",
        "--kills",
        "3",
        "--only",
        "/DMP+noDDIO+PM-RQWRB/",
    ]);
    let s = text(&correct.stdout);
    assert!(correct.status.success(), "{s}\n{}", text(&correct.stderr));
    assert!(
        s.matches("| pass |").count() == 12 && !s.contains("FAIL"),
        "{s}"
    );
    let negative = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "negative",
        "--clients",
        "3",
        "--kills",
        "200",
        "--only",
        "slots-by-connection-order",
    ]);
    let s = text(&negative.stdout);
    assert!(negative.status.success(), "{s}\n{}", text(&negative.stderr));
    assert!(
        s.contains("caught:") && s.contains("given a region not its own"),
        "{s}"
    );
}

#[test]
fn crash_loops_keep_their_servers_words_in_a_log_and_show_them_when_they_fail() {
    // A server that cannot start: its own error reaches the loop's, in both loops.
    for cmd in [&["crashcheck", "--real"][..], &["rpc-crashcheck"][..]] {
        let flags = ["--kills", "1", "--targets", "correct"];
        let out = remora(&[cmd, &flags, &["--server-listen", "256.0.0.1:0"]].concat());
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}: {}", text(&out.stdout));
        assert!(
            err.contains("did not start") && err.contains("cannot listen on 256.0.0.1:0"),
            "{cmd:?}: {err}"
        );
    }
    // A healthy takeover loop provokes departures and refusals on purpose: the servers
    // report them to the log, one header per life, and nothing of theirs reaches the loop's
    // standard error.
    let log = std::env::temp_dir().join(format!("remora-servers-{}.log", std::process::id()));
    let out = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "correct",
        "--only",
        "takeover/DMP+noDDIO+PM-RQWRB",
        // Enough lives that one refuses a returning client (its slot taken over) however
        // the kills fall: CI once saw five lives with none.
        "--kills",
        "12",
        "--clients",
        "2",
        "--server-log",
        log.to_str().unwrap(),
    ]);
    let kept = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let (s, err) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{s}\n{err}");
    assert_eq!(kept.matches("--- server: serve ").count(), 13, "{kept}");
    assert!(
        kept.lines().any(|l| l.starts_with("client ")),
        "the servers said nothing of their clients: {kept}"
    );
    assert!(!err.lines().any(|l| l.starts_with("client ")), "{err}");
}

#[test]
fn real_loops_refuse_a_selection_that_matches_no_target() {
    // A typo in --only must fail, not pass with an empty table; both loops share the rule.
    for cmd in [&["crashcheck", "--real"][..], &["rpc-crashcheck"][..]] {
        let out = remora(&[cmd, &["--only", "NOMATCH", "--kills", "1"]].concat());
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}: {}", text(&out.stdout));
        assert!(
            err.contains("no target matches --targets all --only \"NOMATCH\""),
            "{cmd:?}: {err}"
        );
        assert!(!text(&out.stdout).contains("| target |"), "{cmd:?}");
    }
}

#[test]
fn real_sigkill_loop_catches_the_negative_controls() {
    // Their windows are nanoseconds with the default profile; the slow-data-path profile
    // stretches them past a loopback round trip. Each stops at its first catch: the cap
    // only bounds a control that is not caught. (Since remora-exec replaced tokio, the
    // write2-flush control takes 11-102 SIGKILLs on a quiet machine, 3-10 before, and
    // more on a loaded one: docs/results/soft-rnic-history.md, fifteenth session.)
    let out = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "negative",
        "--kills",
        "1000",
        "--profile",
        "slow-data-path",
        "--no-reuse",
    ]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    // The seven RemoteLog controls and the four takeover ones (a server that does not
    // clear a slot for a new client, one that clears it with the old key in place, one
    // that leaves its receive ring, one that stops a clear when its new client leaves).
    assert_eq!(s.matches("caught:").count(), 11, "{s}");
    // The two collectors that publish the head of a reused ring before it is durable. Their
    // window is the collector's pause, wide on the default profile; the slow one leaves a
    // life too few appends to go round the ring.
    let out = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "negative",
        "--only",
        "ring-reuse/",
        "--kills",
        "1000",
    ]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    assert_eq!(s.matches("caught:").count(), 2, "{s}");
    assert_eq!(
        s.matches("| ring-reuse/head-visible-first/").count(),
        2,
        "{s}"
    );
}

#[test]
fn slots_taken_over_are_cleared_across_sigkills() {
    // New clients, two lanes at once, take over slots others left (three slots, no lease),
    // SIGKILLs landing in clears too; after each restart a new client finds zeros and a
    // returning one its own marks, or is refused as no longer the owner (the negative
    // controls are in `real_sigkill_loop_catches_the_negative_controls`).
    let out = remora(&[
        "crashcheck",
        "--real",
        "--targets",
        "correct",
        "--only",
        "takeover/",
        "--kills",
        "30",
        "--clients",
        "2",
    ]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    for config in [
        "DMP+noDDIO+PM-RQWRB",
        "DMP+DDIO+DRAM-RQWRB",
        "WSP+DDIO+PM-RQWRB",
    ] {
        assert!(s.contains(&format!("| takeover/{config} |")), "{s}");
    }
    assert!(s.contains("3 targets, 90 SIGKILLs"), "{s}");
    // Some new clients give up on their handshakes (during their slots' clears, as often
    // as not), and the new clients after them must still find their regions all zero.
    assert!(
        s.contains("new clients of the takeover targets left before they were accepted"),
        "{s}"
    );
}

#[test]
fn two_hosts_in_network_namespaces() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/two-hosts.sh");
    let out = Command::new("bash")
        .args([script, env!("CARGO_BIN_EXE_remora")])
        .env("KILLS", "2")
        .output()
        .expect("run scripts/two-hosts.sh");
    if out.status.code() == Some(77) {
        eprintln!("skipped: {}", text(&out.stdout).trim());
        return;
    }
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}\n{}", text(&out.stderr));
    assert!(
        s.contains("two-hosts: ok") && s.contains("| pass |") && !s.contains("FAIL"),
        "{s}"
    );
}

#[test]
fn streamed_writes_survive_a_sigkill_once_their_flush_completed() {
    // The streaming path (write trains, coalesced ACKs, FLUSHes in flight): the server is
    // SIGKILLed right after a FLUSH completed while later batches are still in flight;
    // every WRITE posted before that FLUSH must be in the pool file.
    use remora::{Primitive, Shape};
    use remora_model::mem::PmMedia;
    use remora_verbs::Verbs;
    const BATCH: u64 = 200;
    for (run, kill_after) in [(0u64, 0u64), (1, 3), (2, 6)] {
        let dir = scratch(&format!("stream-kill-{run}"));
        let pool = dir.path().join("pool.pm");
        let mut server = Server::start(&pool, "DMP+noDDIO+PM-RQWRB");
        let addr = server.1.clone();
        let record = |i: u64| -> [u8; 64] {
            let mut r = [0u8; 64];
            for (j, b) in r.iter_mut().enumerate() {
                *b = (i * 7 + j as u64 + run) as u8 | 1;
            }
            r[..8].copy_from_slice(&i.to_le_bytes());
            r
        };
        let region = remora_exec::block_on(async {
            let (node, _c, mut client) = remora_soft::client::connect(
                &addr,
                &remora_model::profile::LatencyProfile::default_profile(),
            )
            .await
            .unwrap();
            let hello = client
                .connect(Primitive::Write, Shape::default())
                .await
                .unwrap();
            // A FLUSH per batch, three in flight (as `bench soft`); the kill comes right
            // after the FLUSH of batch `kill_after` completed, two later batches in flight.
            let mut tickets = std::collections::VecDeque::new();
            let mut completed = 0;
            for round in 0.. {
                for i in round * BATCH..(round + 1) * BATCH {
                    client.write_nowait(i * 64, &record(i)).unwrap();
                }
                tickets.push_back(client.post_flush_writes().unwrap());
                node.compute(remora_model::time::Duration::ZERO).await;
                if tickets.len() == 3 {
                    client
                        .wait_flush(tickets.pop_front().unwrap())
                        .await
                        .unwrap();
                    completed += 1;
                    if completed == kill_after + 1 {
                        server.0.kill().unwrap();
                        break;
                    }
                }
            }
            hello.region_addr
        });
        let _ = server.0.wait();
        let p = remora_soft::pool::Pool::open_or_create(&pool, 64 << 20).unwrap();
        for i in 0..(kill_after + 1) * BATCH {
            let mut got = [0u8; 64];
            p.read(region + i * 64, &mut got);
            assert_eq!(
                got,
                record(i),
                "run {run}: WRITE {i} acknowledged by a FLUSH"
            );
        }
        drop(p);
        drop(server);
    }
}

/// Connects to `addr` as `key` (0: a new client), reads the first byte at offset 64 of its
/// region, and makes `mark` durable there: the connection's node (the connection lives
/// while it does), the byte read and the client's key.
async fn mark_as(
    addr: &str,
    key: u64,
    mark: u8,
) -> Result<(remora_soft::runtime::RtNode, u8, u64), remora_soft::client::ConnectError> {
    let profile = remora_model::profile::LatencyProfile::default_profile();
    let mut c = remora_soft::client::connect_as(addr, &profile, key).await?;
    c.client
        .connect(remora::Primitive::Write, remora::Shape::default())
        .await
        .unwrap();
    let before = c.client.read(64, 64).await.unwrap()[0];
    c.client.persist(64, &[mark; 64]).await.unwrap();
    Ok((c.node, before, c.key))
}

/// After a SIGKILL of the server with two clients connected, each client that comes back
/// with its key gets its own region, whichever comes back first, and a new client gets a
/// slot of its own (before, slots went by connection order: the first client back was given
/// the first client's region).
#[test]
fn after_a_sigkill_each_client_comes_back_to_its_own_region() {
    let dir = scratch("own-slot");
    let pool = dir.path().join("pool.pm");
    let mark =
        |addr: String, key: u64, mark: u8| async move { mark_as(&addr, key, mark).await.unwrap() };
    let mut server = Server::start(&pool, "DMP+noDDIO+PM-RQWRB");
    let (ka, kb) = remora_exec::block_on(async {
        let (_a, _, ka) = mark(server.1.clone(), 0, 0xa1).await;
        let (_b, _, kb) = mark(server.1.clone(), 0, 0xb2).await;
        // Killed with both connected.
        server.0.kill().unwrap();
        (ka, kb)
    });
    let _ = server.0.wait();
    drop(server);
    let server = Server::start(&pool, "DMP+noDDIO+PM-RQWRB");
    remora_exec::block_on(async {
        let (_b, before, key) = mark(server.1.clone(), kb, 0xb3).await;
        assert_eq!(
            (before, key),
            (0xb2, kb),
            "b came back first, to its own region"
        );
        let (_a, before, key) = mark(server.1.clone(), ka, 0xa2).await;
        assert_eq!((before, key), (0xa1, ka));
        let (_c, before, key) = mark(server.1.clone(), 0, 0xc1).await;
        assert_eq!(before, 0, "a new client has a region of its own");
        assert!(key != ka && key != kb);
    });
}

/// A slot that a crash left marked as being cleared (the server had begun to clear it for a
/// new client) is nobody's after a restart: its old client's key is refused, and the next
/// new client gets it at once (no lease keeps it), cleared of the old client's bytes, while
/// the other client's slot stays its own.
#[test]
fn a_slot_a_crash_left_being_cleared_goes_cleared_to_a_new_client() {
    use remora_soft::client::ConnectError;
    use remora_soft::cm::{RefuseCode, CLEARING_KEY};
    let dir = scratch("clearing-slot");
    let pool = dir.path().join("pool.pm");
    let mark = |addr: String, key: u64, mark: u8| async move { mark_as(&addr, key, mark).await };
    // Two slots (of about 4 MiB each).
    let flags = ["--pool-bytes", "12582912"];
    let mut server = Server::start_with(&pool, "DMP+noDDIO+PM-RQWRB", &flags);
    let (ka, kb) = remora_exec::block_on(async {
        let (_a, _, ka) = mark(server.1.clone(), 0, 0xa1).await.unwrap();
        let (_b, _, kb) = mark(server.1.clone(), 0, 0xb2).await.unwrap();
        server.0.kill().unwrap();
        (ka, kb)
    });
    let _ = server.0.wait();
    drop(server);
    // What a crash between marking a's slot and clearing it leaves: its key in the keys'
    // table replaced by the clearing mark, its region as it was.
    let mut bytes = std::fs::read(&pool).unwrap();
    let at: Vec<usize> = (0..bytes.len() - 8)
        .filter(|&i| bytes[i..i + 8] == ka.to_le_bytes())
        .collect();
    assert_eq!(at.len(), 1, "a's key is in the pool once");
    bytes[at[0]..at[0] + 8].copy_from_slice(&CLEARING_KEY.to_le_bytes());
    std::fs::write(&pool, &bytes).unwrap();
    let server = Server::start_with(&pool, "DMP+noDDIO+PM-RQWRB", &flags);
    remora_exec::block_on(async {
        for key in [ka, CLEARING_KEY] {
            match mark(server.1.clone(), key, 0xa2).await {
                Err(ConnectError::Refused { code, .. }) => assert_eq!(code, RefuseCode::NotOwner),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("a claim of {key:#x} got a slot"),
            }
        }
        let (_c, before, kc) = mark(server.1.clone(), 0, 0xc1)
            .await
            .expect("the slot being cleared is free for a new client");
        assert_eq!(before, 0, "cleared of a's bytes");
        assert!(kc != ka && kc != kb && kc != CLEARING_KEY);
        let (_b, before, _) = mark(server.1.clone(), kb, 0xb3).await.unwrap();
        assert_eq!(before, 0xb2, "b's slot is b's");
    });
}

#[test]
fn bench_soft_streams_side_by_side() {
    let dir = scratch("bench-soft-stream");
    let out = remora(&[
        "bench",
        "soft",
        "--stream-only",
        "--stream",
        "3000",
        "--pool-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("116-byte messages") && s.contains("80-byte messages"),
        "{s}"
    );
    assert!(
        s.contains("at equal bytes") && s.contains("soft RNIC client"),
        "{s}"
    );
    // The model-free frame stream ran beside them (its sink acknowledged every WRITE).
    assert!(
        s.contains("frames without its model") && s.contains("frames without the model sender"),
        "{s}"
    );
}

/// The latency half of `bench soft`, small: every one-round-trip method's row, with each
/// side's CPU per append, beside the raw ping-pong's; and the model check's row for every
/// RemoteLog scenario, consistent with the calibration and with its verdict.
#[test]
fn bench_soft_reports_latency_and_cpu_per_method() {
    let dir = scratch("bench-soft-latency");
    let out = remora(&[
        "bench",
        "soft",
        "--n",
        "200",
        "--stream",
        "1000",
        "--pool-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("CPU per round trip"), "{s}");
    // The report names the build it measured (the library this test links was built
    // alongside the binary, with the same REMORA_BUILD or none).
    let build = remora_cli::softbench::build();
    assert!(s.contains(&format!("Build: {build}\n")), "{s}");
    // The peers stopped on SIGTERM (a peer that does not is killed and reported).
    assert!(
        !text(&out.stderr).contains("did not stop"),
        "{}",
        text(&out.stderr)
    );
    // The two executor ping-pongs (client only, both sides) ran against the echo process.
    assert!(s.contains("as a task of the soft RNIC's executor"), "{s}");
    let both = s
        .lines()
        .find(|l| l.starts_with("The same with the echo on the executor too"))
        .unwrap_or_else(|| panic!("no both-sides executor series: {s}"));
    assert!(both.contains(" of 200 ≥ 1 ms"), "{both}");
    // The means the model check is calibrated with.
    let mean_of = |line: &str| -> f64 {
        line.split("mean ")
            .nth(1)
            .and_then(|m| m.split(' ').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("no mean in {line}"))
    };
    let raw_mean = mean_of(
        s.lines()
            .find(|l| l.starts_with("Raw TCP ping-pong"))
            .unwrap(),
    );
    let both_mean = mean_of(both);
    // The both-sides ping-pong's CPU per round trip, client and echo.
    let both_cpu: f64 = both
        .split("CPU per round trip ")
        .nth(1)
        .map(|t| {
            t.split(" µs ")
                .filter_map(|w| w.split(' ').next_back()?.parse::<f64>().ok())
                .sum()
        })
        .unwrap_or_else(|| panic!("no CPU in {both}"));
    // Every series took its samples in rounds, and the processes sat where the default
    // placement puts them (two CPUs: the benchmark on one, its peers on the other).
    assert!(s.contains("Interleaved: 2 rounds"), "{s}");
    if std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2) {
        assert!(
            s.contains("the echo process and the servers on CPU 1"),
            "{s}"
        );
    }
    let table = |starts: &[&str]| -> Vec<Vec<&str>> {
        s.lines()
            .filter(|l| starts.iter().any(|p| l.starts_with(p)))
            .map(|l| l.split('|').map(str::trim).collect())
            .collect()
    };
    let rows = table(&["| WSP", "| DMP"]);
    assert_eq!(rows.len(), 9, "{s}");
    // The model check's rows: every RemoteLog scenario once.
    let model = table(&["| singleton", "| compound"]);
    let scenarios: std::collections::BTreeSet<(&str, &str, &str)> =
        model.iter().map(|r| (r[1], r[2], r[3])).collect();
    assert_eq!((model.len(), scenarios.len()), (72, 72), "{s}");
    for r in &rows {
        // | server | method | mean | p50 | p99 | slow | ratio | added | client CPU | server CPU |
        let (p50, ratio, added): (f64, f64, f64) = (
            r[4].parse().unwrap(),
            r[7].parse().unwrap(),
            r[8].parse().unwrap(),
        );
        // The added microseconds and the ratio describe the same raw p50, to the rounding
        // of the printed figures (0.05 µs each for p50 and added, 0.005 for the ratio).
        let (by_added, by_ratio) = (p50 - added, p50 / ratio);
        assert!(
            by_added > 0.0
                && (by_added - by_ratio).abs()
                    <= 0.1 + 0.05 / ratio + p50 * 0.005 / (ratio * ratio) + 1e-9,
            "{r:?}"
        );
        let client: f64 = r[9].parse().unwrap();
        let server: f64 = r[10].parse().unwrap();
        // Somebody worked on every append, and no side spent more than a millisecond on one.
        assert!(client > 0.0 && client < 1000.0, "{r:?}");
        assert!(server > 0.0 && server < 1000.0, "{r:?}");
        // The same scenario's model-check row: its mean, one round trip, and the model's
        // CPU (both sides' CPU per append less the both-sides ping-pong's per round trip,
        // to the rounding of the printed figures).
        let m = model
            .iter()
            .find(|m| m[1] == "singleton" && m[2] == r[1] && m[4] == r[2])
            .unwrap_or_else(|| panic!("no model-check row for {r:?}"));
        assert_eq!((m[5], m[6]), ("1", r[3]), "{m:?} {r:?}");
        let model_cpu: f64 = m[13].parse().unwrap();
        assert!(
            (model_cpu - (client + server - both_cpu)).abs() <= 0.03,
            "{m:?}: ping-pong CPU {both_cpu}"
        );
    }
    let mut within = 0;
    for r in &model {
        // | update | server | primitive | method | round trips | mean | slow | predicted |
        // ratio | I/O-path predicted | ratio | miss | model CPU | preemptions | verdict |
        let num = |i: usize| -> f64 { r[i].parse().unwrap_or_else(|_| panic!("{r:?}")) };
        let (trips, mean, strict, via_io) = (num(5), num(6), num(8), num(10));
        assert!(trips == 1.0 || trips == 2.0, "{r:?}");
        // The attribution's prediction differs from the strict one by the difference of
        // the two round trips it was calibrated with, once per round trip of the method.
        assert!(
            ((via_io - strict) - trips * (both_mean - raw_mean)).abs() <= 0.1 + 0.15 * trips,
            "{r:?}: round trips {raw_mean} and {both_mean}"
        );
        // Each ratio to the rounding of the figures it is printed from (0.05 µs each, and
        // 0.005 for the ratio): a loaded machine's large ratios carry larger errors.
        let tol = |pred: f64| 0.005 + 0.05 / pred + 0.05 * mean / (pred * pred) + 1e-9;
        let (ratio_strict, ratio_io) = (num(9), num(11));
        assert!((ratio_strict - mean / strict).abs() <= tol(strict), "{r:?}");
        assert!((ratio_io - mean / via_io).abs() <= tol(via_io), "{r:?}");
        assert!((num(12) - (mean - via_io)).abs() <= 0.16, "{r:?}");
        // The verdict follows the ratio (away from the edge, where rounding decides).
        if ((ratio_strict - 1.0).abs() - 0.25).abs() > 0.01 {
            let inside = (ratio_strict - 1.0).abs() < 0.25;
            assert_eq!(r[15] == "within", inside, "{r:?}");
        }
        within += usize::from(r[15] == "within");
        // Preemptions come only from appends of a millisecond or more.
        assert_eq!(r[7] == "0", num(14) == 0.0, "{r:?}");
    }
    assert!(
        s.contains(&format!(
            "Within ±25% of the prediction: {within} of 72 scenarios"
        )),
        "{s}"
    );
}

/// CPU time (user + system, in clock ticks) a process has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses): utime is the 12th, stime
    // the 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A server that runs out of file descriptors says so once, waits between attempts instead
/// of spinning on the listener, keeps its process, and serves again once descriptors are
/// free.
#[test]
fn a_server_out_of_descriptors_backs_off_and_serves_again() {
    use std::os::unix::process::CommandExt;
    let dir = scratch("emfile");
    let pool = dir.path().join("pool.pm");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_remora"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--pool"])
        .arg(&pool)
        .args(["--config", "DMP+noDDIO+PM-RQWRB"])
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec the child only calls setrlimit(2), which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let l = libc::rlimit {
                rlim_cur: 32,
                rlim_max: 32,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let server = Server::spawn(cmd);
    // More idle connections than the server has descriptors: the kernel completes them
    // (the listen backlog), the server accepts until it runs out.
    let idle: Vec<std::net::TcpStream> = (0..40)
        .map(|_| std::net::TcpStream::connect(&server.1).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = server.0.id();
    let before = cpu_ticks(pid);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let used = cpu_ticks(pid) - before;
    // Clock ticks are 1/100 s: a spinning accept loop would use about 100 in this second.
    assert!(
        used < 50,
        "{used} ticks of CPU in one second out of descriptors"
    );
    drop(idle);
    let out = remora(&["remotelog", "--server", &server.1, "--appends", "20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut server = server;
    let _ = server.0.kill();
    let _ = server.0.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut server.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("accept failed"), "{err}");
    assert!(err.contains("accepting connections again"), "{err}");
    assert_eq!(err.matches("accept failed").count(), 1, "said once: {err}");
}

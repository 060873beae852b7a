//! The evaluation's outputs, written by one function ([`write_report`]): `rpc.md` (tables
//! laid out like seed 003's figures, with every substitution and skipped cell stated),
//! `rpc.csv` and `rpc.json` (every run), and SVG bar charts (plotters).

use super::{RecoveryResult, Results, RunResult};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use super::claims::{claims, verdict, Claim};
use super::claims::{claims_section, pct};

/// Designs in the order they first appear (the figures' order).
fn designs(rs: &[RunResult]) -> Vec<String> {
    distinct(rs.iter().map(|r| r.design.clone()))
}

/// Distinct values of `col` in order of appearance.
fn columns(rs: &[RunResult], col: &dyn Fn(&RunResult) -> String) -> Vec<String> {
    distinct(rs.iter().map(col))
}

fn find<'a>(
    rs: &'a [RunResult],
    design: &str,
    col: &dyn Fn(&RunResult) -> String,
    c: &str,
) -> Option<&'a RunResult> {
    rs.iter().find(|r| r.design == design && col(r) == c)
}

pub(super) fn us(ns: f64) -> String {
    if ns.is_nan() {
        "–".into()
    } else {
        format!("{:.1}", ns / 1e3)
    }
}

pub(super) fn size(b: u64) -> String {
    if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KB", b / 1024)
    } else {
        format!("{b} B")
    }
}

/// What a figure of an experiment set that did not run (`--sets`) says instead.
const NOT_RUN: &str = "*Not run in this evaluation (`--sets`).*";

/// A figure's `intro`, its `table` of `rows` and the link to its plot `file`; a set that
/// did not run (no rows) gets [`NOT_RUN`] alone: no description of a run that did not
/// happen, no empty table, no plot.
fn figure(rows: &[RunResult], intro: &str, table: String, alt: &str, file: &str) -> String {
    if rows.is_empty() {
        format!("{NOT_RUN}\n\n")
    } else {
        format!("{intro}{table}\n![{alt}]({file})\n")
    }
}

/// A Markdown table: designs × `col` values, each cell `metric` (or n/a when skipped).
fn table(
    rs: &[RunResult],
    corner: &str,
    col: &dyn Fn(&RunResult) -> String,
    metric: &dyn Fn(&RunResult) -> String,
) -> String {
    let cols = columns(rs, col);
    let mut s = format!("| {corner} |");
    for c in &cols {
        let _ = write!(s, " {c} |");
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(cols.len()));
    s.push('\n');
    for d in designs(rs) {
        let _ = write!(s, "| {d} |");
        for c in &cols {
            let cell = match find(rs, &d, col, c) {
                Some(r) if r.skipped.is_none() => metric(r),
                Some(_) => "n/a".into(),
                None => String::new(),
            };
            let _ = write!(s, " {cell} |");
        }
        s.push('\n');
    }
    s
}

fn notes(rs: &Results) -> String {
    let mut s = String::new();
    let mut seen: Vec<String> = Vec::new();
    for r in rs.runs() {
        for n in [&r.transport_note, &r.skipped].into_iter().flatten() {
            let line = if r.skipped.as_ref() == Some(n) {
                n.clone()
            } else {
                format!("{}: {n}", r.design)
            };
            if !seen.contains(&line) {
                seen.push(line);
            }
        }
    }
    for l in seen {
        let _ = writeln!(s, "- {l}");
    }
    s
}

/// Distinct values in order of first appearance (the figures' order).
fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// A recovery table: one row per design × read percentage of `rows`, one column per
/// availability, each cell `cell(design, read percent, availability)` (– when `None`).
fn recovery_table(
    rows: &[&RecoveryResult],
    cell: &dyn Fn(&str, u32, f64) -> Option<String>,
) -> String {
    let avs = distinct(rows.iter().map(|r| r.availability));
    let mut s = String::from("| design | read:write |");
    for a in &avs {
        let _ = write!(s, " {:.0}% available |", a * 100.0);
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---|".repeat(avs.len()));
    s.push('\n');
    for (d, rp) in distinct(rows.iter().map(|r| (r.design.as_str(), r.read_percent))) {
        let _ = write!(s, "| {d} | {rp}:{} |", 100 - rp);
        for &a in &avs {
            match cell(d, rp, a) {
                Some(c) => {
                    let _ = write!(s, " {c} |");
                }
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    s
}

/// Figure 12 as the paper normalizes it: each durable RPC's total time divided by the
/// total time of the same latencies with a sender that re-sends (rows: design × read %,
/// columns: availability).
fn recovery_normalized(rs: &[RecoveryResult]) -> String {
    let durable: Vec<&RecoveryResult> = rs
        .iter()
        .filter(|r| r.side.starts_with("durable"))
        .collect();
    if durable.is_empty() {
        return "No durable RPC ran.\n".into();
    }
    recovery_table(&durable, &|d, rp, a| {
        let find = |durable: bool| {
            rs.iter().find(|r| {
                r.design == d
                    && r.read_percent == rp
                    && r.availability == a
                    && r.side.starts_with("durable") == durable
            })
        };
        let (x, y) = (find(true)?, find(false)?);
        Some(format!("{:.3}", x.total_s / y.total_s))
    })
}

/// Slowdown of every baseline over its failure-free time (rows: design × read %).
fn recovery_baselines(rs: &[RecoveryResult]) -> String {
    let base: Vec<&RecoveryResult> = rs
        .iter()
        .filter(|r| !super::recovery::is_durable(&r.design))
        .collect();
    recovery_table(&base, &|d, rp, a| {
        let r = base
            .iter()
            .find(|r| r.design == d && r.read_percent == rp && r.availability == a)?;
        Some(format!("{:.3}×", r.total_s / r.failure_free_s))
    })
}

/// Opens a hand-written section of the results page: [`keep_hand_written`] carries it
/// over when the page is regenerated.
pub const HAND_WRITTEN_BEGIN: &str = "<!-- hand-written -->";
/// Closes a hand-written section.
pub const HAND_WRITTEN_END: &str = "<!-- /hand-written -->";

/// `new` (a freshly generated page) followed by every hand-written section of `old` (the
/// page it replaces), markers included and in order, so explanations written by hand
/// survive regeneration. An unclosed section runs to the end of `old`.
pub fn keep_hand_written(old: &str, new: &str) -> String {
    let mut out = new.to_string();
    let mut rest = old;
    while let Some(i) = rest.find(HAND_WRITTEN_BEGIN) {
        let section = &rest[i..];
        let end = section
            .find(HAND_WRITTEN_END)
            .map_or(section.len(), |j| j + HAND_WRITTEN_END.len());
        if !out.ends_with("\n\n") {
            out.push_str(if out.ends_with('\n') { "\n" } else { "\n\n" });
        }
        out.push_str(section[..end].trim_end_matches('\n'));
        out.push('\n');
        rest = &section[end..];
    }
    out
}

/// The first line of the results page ([`markdown`]): how `remora bench rpc --results`
/// knows a file is its own page, which it may rewrite.
pub const RESULTS_TITLE: &str = "# RPC designs of seed 003 on the simulator";

/// The results page.
pub fn markdown(rs: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{RESULTS_TITLE}\n");
    if !rs.command.is_empty() {
        let _ = writeln!(
            s,
            "Regenerate this page (and its data and plots) with:\n\n```\n{}\n```\n",
            rs.command
        );
    }
    let _ = writeln!(s, "{}\n", sizes_text(rs));
    if rs.sets.len() < crate::bench::Set::ALL.len() {
        let _ = writeln!(
            s,
            "**Part of the evaluation**: only the experiment sets {} ran (`--sets`); the \
             other sections are empty and their claims not measured.\n",
            rs.sets.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "Seed {}, profile `{}`, server {} (seed 003 §5.1: DDIO disabled), heavy load = {} µs of \
         processing per request, {} server worker threads for every design. Baselines are the communication patterns of seed 003 Figure 2; \
         every baseline server persists a Put (`clwb`+`sfence`) before replying. The durable \
         RPCs (§4.2) use the **{}** Flush primitives; a durable Put returns once its redo-log \
         entry is durable, a read once its result arrived, and each sender's connection has a \
         64-entry log. Latencies in µs of simulated time.{}\n",
        rs.seed,
        rs.profile,
        rs.config,
        rs.heavy_processing_ns as f64 / 1e3,
        rs.server_threads,
        rs.flush,
        if rs.wall_s > 0.0 {
            format!(" This run took {:.0} s of wall-clock time.", rs.wall_s)
        } else {
            String::new()
        }
    );
    let _ = writeln!(s, "{}", claims_section(rs));
    let by_size = |r: &RunResult| size(r.object_bytes);
    for (load, fig) in [("heavy", "8(a)"), ("light", "8(b)")] {
        let m: Vec<RunResult> = rs
            .micro
            .iter()
            .filter(|r| r.load == load)
            .cloned()
            .collect();
        let _ = writeln!(
            s,
            "## Micro-benchmark, {load} load: throughput (Kops/s) (§5.2, Figure {fig})\n\n{}",
            figure(
                &m,
                "",
                table(&m, "design", &by_size, &|r| format!(
                    "{:.1}",
                    r.throughput_ops_s / 1e3
                )),
                &format!("throughput, {load} load"),
                &format!("rpc-micro-{load}.svg")
            )
        );
        let _ = writeln!(
            s,
            "## Micro-benchmark, {load} load: p99 latency (µs) (§5.2, Figure 9)\n\n{}",
            figure(
                &m,
                "",
                table(&m, "design", &by_size, &|r| us(r.p99_ns as f64)),
                &format!("p99, {load} load"),
                &format!("rpc-p99-{load}.svg")
            )
        );
    }
    let mean = |r: &RunResult| us(r.mean_ns);
    let _ = writeln!(
        s,
        "## PageRank: total execution time (ms) (§5.3, Figure 10)\n\n{}",
        figure(
            &rs.pagerank,
            &pagerank_intro(rs),
            table(
                &rs.pagerank,
                "design",
                &|r| pagerank_graph(r).to_string(),
                &|r| format!("{:.2}", r.elapsed_ns as f64 / 1e6)
            ),
            "PageRank",
            "rpc-pagerank.svg"
        )
    );
    let _ = writeln!(
        s,
        "## YCSB: mean latency (µs) (§5.3, Figure 11)\n\n{}",
        figure(
            &rs.ycsb,
            "",
            table(&rs.ycsb, "design", &|r| r.workload.clone(), &mean),
            "YCSB",
            "rpc-ycsb.svg"
        )
    );
    let _ = writeln!(
        s,
        "## Object size: mean latency (µs) (§5.5, Figure 13)\n\n{}",
        figure(
            &rs.sizes,
            "",
            table(&rs.sizes, "design", &by_size, &mean),
            "object size",
            "rpc-sizes.svg"
        )
    );
    let _ = writeln!(
        s,
        "## Concurrent senders: mean latency (µs) (§5.5, Figure 17)\n\n{}",
        figure(
            &rs.senders,
            "",
            table(&rs.senders, "senders", &|r| r.senders.to_string(), &mean),
            "senders",
            "rpc-senders.svg"
        )
    );
    let _ = writeln!(
        s,
        "## Read:write ratio: mean latency (µs) (§5.5, Figure 18)\n\n{}",
        figure(
            &rs.read_write,
            "",
            table(
                &rs.read_write,
                "design",
                &|r| format!("{}:{}", r.read_percent, 100 - r.read_percent),
                &mean
            ),
            "read:write",
            "rpc-read-write.svg"
        )
    );
    let _ = writeln!(
        s,
        "## Batch size: total execution time (ms) (§5.5, Figure 19)\n\n{}",
        figure(
            &rs.batch,
            "",
            table(
                &rs.batch,
                "requests per RPC",
                &|r| r.batch.to_string(),
                &|r| { format!("{:.3}", r.elapsed_ns as f64 / 1e6) }
            ),
            "batch",
            "rpc-batch.svg"
        )
    );
    s.push_str(&load_sections(rs));
    let p = &rs.recovery_params;
    // The recovery model is fed by the read:write set; without it there is nothing to say.
    if rs.recovery.is_empty() && rs.replay.is_empty() {
        let _ = writeln!(
            s,
            "## Failure recovery: total execution time (§5.4, Figure 12)\n\n{NOT_RUN}\n"
        );
    } else {
        let _ = writeln!(
            s,
            "## Failure recovery: total execution time (§5.4, Figure 12)\n\n\
         A timeline model (`bench::recovery`) fed with each design's simulated mean read and \
         write latencies from the read:write runs above: {} RPCs, {} ms restarts, {} ms \
         re-transfer interval; the availabilities are assumptions (the paper does not list \
         them). A durable RPC keeps logging writes during an outage and re-executes them from \
         its log after the restart, at a replay cost measured on the simulator (below); a \
         baseline re-sends.\n\n\
         Durable RPCs, normalized as in Figure 12: total time divided by the total time of \
         the same latencies with a sender that re-sends (below 1 = recovery from the log \
         helps).\n\n{}\n\
         Baselines: total time over failure-free time.\n\n{}\n\
         Replay cost per logged request, measured by filling a redo log with {} KB Puts the \
         server had not processed, cutting its power and timing `DurableServer::recover`:\n\n{}\n\
         Every row, with absolute times, is in `rpc.json`.\n",
            p.rpcs,
            p.restart_ns / 1_000_000,
            p.retransfer_ns / 1_000_000,
            recovery_normalized(&rs.recovery),
            recovery_baselines(&rs.recovery),
            rs.replay.first().map_or(0, |r| r.object_bytes / 1024),
            replay_table(rs)
        );
    }
    let _ = writeln!(
        s,
        "## Substitutions and model differences\n\n{}",
        model_notes(rs)
    );
    let _ = writeln!(
        s,
        "## Notes\n\n{}\
- Busy polling of memory (FaRM, HERD, L5, RFP's server, ScaleRPC) probes every \
`cpu.poll_ns`, and 4 × `cpu.poll_ns` apart after 5 µs of waiting, so noticing a message \
late by at most 0.4 µs after long waits (`baselines::Polling`).\n\
- Only objects the operation streams touch are preloaded; untouched objects change no \
measurement.\n\
- FaSST's 4 KB UD MTU is applied to object bytes (values, scan results, batches); cell and \
frame headers are not counted against it.\n\
- A batched RPC's latency is recorded once per RPC; its operations share it equally in the \
read/write means.\n\
- Throughput is operations over the simulated time from the first request until every \
sender drained its replies (a durable RPC's backlog is included).",
        notes(rs)
    );
    s
}

/// Idle and busy runs of one load study side by side: design | idle | busy | change.
fn load_table(idle: &[RunResult], busy: &[RunResult]) -> String {
    let mut s = String::from("| design | idle | busy | change |\n|---|---|---|---|\n");
    for d in designs(idle) {
        let i = idle.iter().find(|r| r.design == d);
        let b = busy.iter().find(|r| r.design == d);
        match (i, b) {
            (Some(i), Some(b)) if i.skipped.is_none() && b.skipped.is_none() => {
                let _ = writeln!(
                    s,
                    "| {d} | {} | {} | {} |",
                    us(i.mean_ns),
                    us(b.mean_ns),
                    pct((b.mean_ns / i.mean_ns - 1.0) * 100.0)
                );
            }
            _ => {
                let _ = writeln!(s, "| {d} | n/a | n/a | |");
            }
        }
    }
    s
}

/// Figure 20's table: design | sender software | network | receiver software | total |
/// software share.
fn breakdown_table(rs: &[RunResult]) -> String {
    let mut s = String::from(
        "| design | sender software | network (hardware) | receiver software | total | software share |\n|---|---|---|---|---|---|\n",
    );
    for r in rs {
        match (&r.breakdown, &r.skipped) {
            (Some(b), None) => {
                let total = b.sender_ns + b.network_ns + b.receiver_ns;
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {:.0}% |",
                    r.design,
                    us(b.sender_ns),
                    us(b.network_ns),
                    us(b.receiver_ns),
                    us(total),
                    (b.sender_ns + b.receiver_ns) / total * 100.0
                );
            }
            _ => {
                let _ = writeln!(s, "| {} | n/a | n/a | n/a | n/a | |", r.design);
            }
        }
    }
    s
}

/// The sections of Figures 14–16 (load studies) and 20 (latency breakdown).
fn load_sections(rs: &Results) -> String {
    let mut s = String::new();
    let ops = rs.load_idle.first().map_or(0, |r| r.ops);
    let net = format!(
        "The micro-benchmark (64 KB objects, 50:50, light load, {ops} operations), idle and \
         with a busy link: a background sender on a node of its own sends {}-byte UD \
         datagrams to the server at {}% of the link bandwidth, pausing while the switch port \
         toward the server holds {:.1} µs or more of packets (link-level flow control; \
         packets still on the wire count). The server's RNIC drops them (no receive posted), \
         so they load the link and the port, not the server's PCIe, memory or CPU; every \
         packet of an RPC toward the server queues behind them.\n\n",
        rs.net_packet_bytes,
        rs.net_load_percent,
        rs.net_max_queue_ns as f64 / 1e3,
    );
    let _ = writeln!(
        s,
        "## Network load: mean latency (µs) (§5.5, Figure 14)\n\n{}",
        figure(
            &rs.net_load,
            &net,
            load_table(&rs.load_idle, &rs.net_load),
            "network load",
            "rpc-net-load.svg"
        )
    );
    let cpu = format!(
        "a CPU-bound background program takes {}% of the node's CPU, in scheduling periods \
         of {:.0} µs on average (`remora_sim::cpu`): the node's threads compute only in \
         their on windows, and a thread woken by a completion, or a poller's next probe, \
         waits for the next one",
        rs.cpu_load_percent,
        rs.cpu_period_ns as f64 / 1e3
    );
    let _ = writeln!(
        s,
        "## Receivers' CPU load: mean latency (µs) (§5.5, Figure 15)\n\n{}",
        figure(
            &rs.server_cpu,
            &format!("The same micro-benchmark, idle and with a busy server: {cpu}.\n\n"),
            load_table(&rs.load_idle, &rs.server_cpu),
            "server CPU load",
            "rpc-server-cpu.svg"
        )
    );
    let _ = writeln!(
        s,
        "## Senders' CPU load: mean latency (µs) (§5.5, Figure 16)\n\n{}",
        figure(
            &rs.sender_cpu,
            &format!("The same micro-benchmark, idle and with a busy sender: {cpu}.\n\n"),
            load_table(&rs.load_idle, &rs.sender_cpu),
            "sender CPU load",
            "rpc-sender-cpu.svg"
        )
    );
    let _ = writeln!(
        s,
        "## Software overhead: YCSB A latency breakdown (µs) (§5.6, Figure 20)\n\n{}",
        figure(
            &rs.breakdown,
            "The YCSB A runs of Figure 11 with every RPC's latency split in three. Receiver \
         software: the time the server's CPU worked on a request the RPC waited for \
         (noticing and dispatching it, processing, the store access with its copy and \
         persist, an RFlush design's CPU persist; for a read or a baseline's RPC also the \
         requests before it on the connection, FIFO; for a durable Put returning at \
         durability only its durability work). Sender software: the sender CPU's work \
         (none: the profile charges a sender nothing for posting and reaping). Network: \
         everything else (NICs, wire, PCIe, memory). Means per RPC; the parts add up to the \
         mean latency.\n\n",
            breakdown_table(&rs.breakdown),
            "breakdown",
            "rpc-breakdown.svg"
        )
    );
    s
}

/// Every run as CSV.
pub fn csv(rs: &Results) -> String {
    let mut s = String::from(
        "experiment,design,workload,object_bytes,senders,batch,load,read_percent,config,ops,rpcs,elapsed_ns,throughput_ops_s,mean_ns,p50_ns,p99_ns,max_ns,read_mean_ns,write_mean_ns,reads_checked,events,fingerprint,transport_note,skipped,condition,sender_ns,network_ns,receiver_ns\n",
    );
    for r in rs.runs() {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{},{},{},{:.1},{:.1},{},{},{:#018x},{},{},{},{},{},{}",
            r.experiment,
            r.design,
            r.workload,
            r.object_bytes,
            r.senders,
            r.batch,
            r.load,
            r.read_percent,
            r.config,
            r.ops,
            r.rpcs,
            r.elapsed_ns,
            r.throughput_ops_s,
            r.mean_ns,
            r.p50_ns,
            r.p99_ns,
            r.max_ns,
            r.read_mean_ns,
            r.write_mean_ns,
            r.reads_checked,
            r.events,
            r.fingerprint,
            r.transport_note.as_deref().unwrap_or(""),
            r.skipped.as_deref().unwrap_or("").replace(',', ";"),
            r.condition,
            r.breakdown.map_or(String::new(), |b| format!("{:.1}", b.sender_ns)),
            r.breakdown.map_or(String::new(), |b| format!("{:.1}", b.network_ns)),
            r.breakdown.map_or(String::new(), |b| format!("{:.1}", b.receiver_ns)),
        );
    }
    s
}

/// Every result as JSON (NaN becomes `null`).
pub fn json(rs: &Results) -> String {
    serde_json::to_string_pretty(rs).expect("results serialize")
}

/// A grouped bar chart: one group per column, one bar per design.
pub fn bars(
    title: &str,
    rs: &[RunResult],
    col: &dyn Fn(&RunResult) -> String,
    value: &dyn Fn(&RunResult) -> f64,
    y_desc: &str,
) -> Result<String, String> {
    let cols = columns(rs, col);
    let ds = designs(rs);
    let ymax = rs
        .iter()
        .filter(|r| r.skipped.is_none())
        .map(value)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.15;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let n = cols.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..n, 0f64..ymax)
            .map_err(|e| e.to_string())?;
        let labels = cols.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(cols.len() * 2 + 1)
            .x_label_formatter(&|x| {
                if (x.fract() - 0.5).abs() < 0.01 {
                    labels.get(x.floor() as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_desc)
            .draw()
            .map_err(|e| e.to_string())?;
        let width = 0.8 / ds.len().max(1) as f64;
        for (k, d) in ds.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let bars: Vec<_> = cols
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let r = find(rs, d, col, c).filter(|r| r.skipped.is_none())?;
                    let v = value(r);
                    let x0 = i as f64 + 0.1 + k as f64 * width;
                    v.is_finite()
                        .then(|| Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], color.filled()))
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(|e| e.to_string())?
                .label(d.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The SVG plots: (file name, SVG).
pub fn svgs(rs: &Results) -> Result<Vec<(String, String)>, String> {
    let by_size = |r: &RunResult| size(r.object_bytes);
    let mut out = Vec::new();
    for load in ["heavy", "light"] {
        let m: Vec<RunResult> = rs
            .micro
            .iter()
            .filter(|r| r.load == load)
            .cloned()
            .collect();
        plot(&mut out, &rs.micro, format!("rpc-micro-{load}.svg"), || {
            bars(
                &format!("Micro-benchmark throughput, {load} load (seed 003 Figure 8)"),
                &m,
                &by_size,
                &|r| r.throughput_ops_s / 1e3,
                "Kops/s",
            )
        })?;
    }
    for load in ["heavy", "light"] {
        let m: Vec<RunResult> = rs
            .micro
            .iter()
            .filter(|r| r.load == load && r.object_bytes >= 1024)
            .cloned()
            .collect();
        plot(&mut out, &rs.micro, format!("rpc-p99-{load}.svg"), || {
            bars(
                &format!("Micro-benchmark p99 latency, {load} load (seed 003 Figure 9)"),
                &m,
                &by_size,
                &|r| r.p99_ns as f64 / 1e3,
                "µs",
            )
        })?;
    }
    let mean = |r: &RunResult| r.mean_ns / 1e3;
    plot(&mut out, &rs.pagerank, "rpc-pagerank.svg".into(), || {
        bars(
            "PageRank total execution time (seed 003 Figure 10)",
            &rs.pagerank,
            &|r| pagerank_graph(r).to_string(),
            &|r| r.elapsed_ns as f64 / 1e6,
            "ms",
        )
    })?;
    plot(&mut out, &rs.ycsb, "rpc-ycsb.svg".into(), || {
        bars(
            "YCSB mean latency (seed 003 Figure 11)",
            &rs.ycsb,
            &|r| r.workload.clone(),
            &mean,
            "µs",
        )
    })?;
    plot(&mut out, &rs.sizes, "rpc-sizes.svg".into(), || {
        bars(
            "Mean latency by object size (seed 003 Figure 13)",
            &rs.sizes,
            &by_size,
            &mean,
            "µs",
        )
    })?;
    plot(&mut out, &rs.senders, "rpc-senders.svg".into(), || {
        bars(
            "Mean latency by concurrent senders (seed 003 Figure 17)",
            &rs.senders,
            &|r| r.senders.to_string(),
            &mean,
            "µs",
        )
    })?;
    plot(
        &mut out,
        &rs.read_write,
        "rpc-read-write.svg".into(),
        || {
            bars(
                "Mean latency by read:write ratio (seed 003 Figure 18)",
                &rs.read_write,
                &|r| format!("{}:{}", r.read_percent, 100 - r.read_percent),
                &mean,
                "µs",
            )
        },
    )?;
    for (file, title, busy) in [
        (
            "rpc-net-load.svg",
            "Mean latency, idle and busy link (seed 003 Figure 14)",
            &rs.net_load,
        ),
        (
            "rpc-server-cpu.svg",
            "Mean latency, idle and busy server CPU (seed 003 Figure 15)",
            &rs.server_cpu,
        ),
        (
            "rpc-sender-cpu.svg",
            "Mean latency, idle and busy sender CPU (seed 003 Figure 16)",
            &rs.sender_cpu,
        ),
    ] {
        let both: Vec<RunResult> = rs.load_idle.iter().chain(busy).cloned().collect();
        plot(&mut out, busy, file.into(), || {
            bars(title, &both, &|r| r.condition.clone(), &mean, "µs")
        })?;
    }
    // Figure 20: one group per part, one bar per design.
    let parts: Vec<RunResult> = ["sender software", "network", "receiver software"]
        .into_iter()
        .enumerate()
        .flat_map(|(k, part)| {
            rs.breakdown.iter().map(move |r| {
                let mut p = r.clone();
                p.condition = part.into();
                p.mean_ns = r
                    .breakdown
                    .map_or(f64::NAN, |b| [b.sender_ns, b.network_ns, b.receiver_ns][k]);
                p
            })
        })
        .collect();
    plot(&mut out, &rs.breakdown, "rpc-breakdown.svg".into(), || {
        bars(
            "YCSB A latency breakdown (seed 003 Figure 20)",
            &parts,
            &|r| r.condition.clone(),
            &mean,
            "µs",
        )
    })?;
    plot(&mut out, &rs.batch, "rpc-batch.svg".into(), || {
        bars(
            "Total execution time by batch size (seed 003 Figure 19)",
            &rs.batch,
            &|r| r.batch.to_string(),
            &|r| r.elapsed_ns as f64 / 1e6,
            "ms",
        )
    })?;
    Ok(out)
}

/// Adds the plot `file` that `make` draws, unless its experiment set `set` did not run
/// (`--sets`): such a set has no plot, and its page links none.
fn plot(
    out: &mut Vec<(String, String)>,
    set: &[RunResult],
    file: String,
    make: impl FnOnce() -> Result<String, String>,
) -> Result<(), String> {
    if !set.is_empty() {
        out.push((file, make()?));
    }
    Ok(())
}

/// Writes `rpc.md`, `rpc.csv`, `rpc.json` and the `rpc-*.svg` plots into `dir` (created if
/// missing); returns the paths written.
pub fn write_report(rs: &Results, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let md = dir.join("rpc.md");
    std::fs::write(&md, markdown(rs))?;
    let mut out = vec![md];
    out.extend(write_data(rs, dir)?);
    Ok(out)
}

/// Writes the report's data and plots (`rpc.csv`, `rpc.json`, the `rpc-*.svg` plots), not
/// its page, into `dir` (created if missing); returns the paths written.
pub fn write_data(rs: &Results, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = vec![
        ("rpc.csv".to_string(), csv(rs)),
        ("rpc.json".to_string(), json(rs)),
    ];
    files.extend(svgs(rs).map_err(std::io::Error::other)?);
    let mut out = Vec::new();
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        out.push(p);
    }
    Ok(out)
}

fn sizes_text(rs: &Results) -> String {
    use crate::workload::{MicroSpec, YcsbKind, YcsbSpec};
    if rs.quick {
        return "**Quick mode** (what CI runs): micro-benchmarks with 256 objects and 40 \
                operations, YCSB with 256 records and 40 operations (scans up to 10), 20 \
                requests per sender and per load study (Figures 14–16), 10^7 RPCs in the recovery model. Shapes only: these \
                sizes are far from the paper's."
            .into();
    }
    let d = rs.divisor.max(1);
    let m = MicroSpec::default();
    let y = YcsbSpec::paper(YcsbKind::A);
    let scale = if d == 1 {
        "**Full size** (seed 003 §5.1)".to_string()
    } else {
        format!("**Reduced size: the paper's sizes divided by {d}** (seed 003 §5.1 runs 50K objects and 300K operations; §5.5 30K requests per sender)")
    };
    format!(
        "{scale}: micro-benchmarks with {} objects and {} operations, YCSB with {} records and \
         {} operations, {} requests per concurrent sender and per load study (Figures \
         14–16); 10^9 RPCs in the recovery model.",
        (m.objects / d).max(1),
        (m.operations / d).max(1),
        (y.records / d).max(1),
        (y.operations / d).max(1),
        (30_000 / d).max(1)
    )
}

/// The graph a PageRank run ran on (its workload is named `"PageRank <graph>"`).
pub(super) fn pagerank_graph(r: &RunResult) -> &str {
    r.workload.trim_start_matches("PageRank ")
}

/// What the PageRank runs did: the graphs' sizes as run, and the assumptions.
fn pagerank_intro(rs: &Results) -> String {
    use crate::workload::{Graph, EDGE_BYTES, PAGERANK_EDGE_NS, PAGERANK_NODE_NS};
    let sizes: Vec<String> = Graph::ALL
        .iter()
        .map(|&g| {
            let p = super::pagerank_spec(rs.quick, rs.divisor, g);
            format!(
                "{}: {} nodes, {} edges in {} objects",
                g.name(),
                p.nodes,
                p.edges,
                p.blocks()
            )
        })
        .collect();
    let p = super::pagerank_spec(rs.quick, rs.divisor, Graph::Dblp);
    format!(
        "One sender runs {} iterations of PageRank over a graph in the server's PM: each \
         iteration it fetches the edge list with a Get per {} KB object ({EDGE_BYTES} bytes \
         per edge), in order, and computes on each object before fetching the next, \
         {PAGERANK_EDGE_NS} ns of its CPU per edge and {PAGERANK_NODE_NS} ns per node at the \
         end of an iteration; the ranks stay in its memory. The CPU times, the layout and \
         the iteration count are assumptions (the paper gives none of them). Graphs of the \
         sizes of §5.1's datasets ({}); their objects are the store's checked objects, not \
         the datasets' edges, which would change no time in the model. The time is the \
         whole run's, fetches and computation.\n\n",
        p.iterations,
        p.block_bytes / 1024,
        sizes.join("; ")
    )
}

fn replay_table(rs: &Results) -> String {
    let mut s = String::from("| design | Flush | entries re-executed | recovery (µs) | per entry (µs) |\n|---|---|---|---|---|\n");
    for r in &rs.replay {
        match &r.skipped {
            None => {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:.1} | {:.2} |",
                    r.design,
                    r.flush,
                    r.reexecuted,
                    r.recover_ns as f64 / 1e3,
                    r.replay_ns / 1e3
                );
            }
            Some(why) => {
                let _ = writeln!(s, "| {} | {} | n/a: {why} | | |", r.design, r.flush);
            }
        }
    }
    s
}

fn model_notes(rs: &Results) -> String {
    let mut s = String::new();
    let sub: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for r in rs.runs() {
            if let Some(n) = &r.transport_note {
                let l = format!("{}: {n}", r.design);
                if !v.contains(&l) {
                    v.push(l);
                }
            }
        }
        v
    };
    let uc_ud = rs.runs().any(|r| r.design == "HERD" || r.design == "FaSST");
    if sub.is_empty() {
        if uc_ud {
            s.push_str("- No transport was substituted: HERD and FaSST ran over UC/UD.\n");
        }
    } else {
        for l in sub {
            let _ = writeln!(s, "- Transport substituted: {l} (same message pattern; the model has no UC/UD queue pairs wired into the baselines in this branch).");
        }
    }
    let unsupported: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for r in rs.runs() {
            if let Some(w) = r.skipped.as_ref().filter(|w| w.starts_with("unsupported")) {
                let l = format!("{}: {w}", r.design);
                if !v.contains(&l) {
                    v.push(l);
                }
            }
        }
        v
    };
    for l in unsupported {
        let _ = writeln!(
            s,
            "- Not run (n/a in every table): {l}. Nothing is substituted for it."
        );
    }
    if rs.flush == "emulated" {
        s.push_str("- Flush primitives in their emulated form (§4.1.3), what the paper measured: WFlush = RDMA READ of the last written byte; SFlush = a 7 µs address-lookup wait then that READ; RFlush = the receiver's CPU persists (`clwb`+`sfence`) and notifies the sender. Run with `--flush native` for the proposed RNIC primitives (cells the model cannot run show n/a).\n");
    }
    let _ = writeln!(
        s,
        "- Every server, baseline or durable, executes requests on one pool of {} worker threads shared by all its connections (`ServerCosts::workers`; seed 003 does not give the number: its server has 2 × 20 cores, §5.1, and its durable server creates \"a thread ... to handle the RPC requests\", §4.2). A request holds a worker for its processing, store access and copies. A baseline sender has one RPC outstanding, so a baseline server never has more than one of a sender's requests to execute; a durable sender has several once they are durable, and their processing overlaps, in FIFO order of their effects. Noticing requests is each design's own: a baseline server has one dispatcher thread for all connections (polling or completions), a durable server one per connection (its receive completions and, for RFlush, the CPU's persist). `--server-threads 1` gives the single-threaded server.",
        rs.server_threads
    );
    s.push_str("- Server CPU charges are the same for every design: `cpu.msg_handle_ns` per request and a `memcpy` of the object (at `cpu.memcpy_bytes_per_ns`, 6.5 µs for 64 KB with the default profile) between the message buffer or redo-log entry and its slot, and of a read's objects into the reply; every server persists a Put (`clwb`+`sfence`) before it counts as executed.\n");
    s.push_str("- PageRank (Figure 10): the workload's fetches and the sender's computation are modelled from the graphs' sizes (per edge and per node, assumed costs); the datasets' edges are not loaded and no ranks are computed, which would change no time in the model.\n");
    s.push_str("- Network load (Figure 14): the simulated link carries a message as one packet, first come first served at each switch port, so a busy port delays each packet of an RPC toward the server by the queue it finds, but does not slow a 64 KB message once it is on the wire (a real switch interleaves it with the background packets at MTU granularity). The queue the background sender keeps (its pause threshold) is an assumption.\n");
    s.push_str("- CPU load (Figures 15–16): one window sequence per node (the background program takes every core at once); its share and scheduling period are assumptions (the paper describes neither). A busy poller and a thread blocked on completions wait alike for the CPU.\n");
    s.push_str("- Latency breakdown (Figure 20): a sender's CPU costs nothing in the latency profile, so sender software is zero for every design; the emulated SFlush's 7 µs lookup is counted as network (it stands for the RNIC's).\n");

    if let Some(note) = senders_note(rs) {
        s.push_str(&note);
    }
    s.push_str("- Under heavy load a durable Put returns at durability while its processing is still under way; a later read's result waits for its own processing and, FIFO, for the Puts logged before it (up to the 64-entry log), which is what the durable designs' heavy-load p99 shows.\n");
    s
}

/// Figure 17 beside the paper's sentence, computed: how much the mean latency grows from
/// one sender to the most senders, for the baselines and for the durable RPCs.
fn senders_note(rs: &Results) -> Option<String> {
    let most = rs.senders.iter().map(|r| r.senders).max()?;
    let growth = |durable: bool| -> Option<(f64, f64)> {
        let mut v = Vec::new();
        for one in rs.senders.iter().filter(|r| {
            r.senders == 1
                && r.skipped.is_none()
                && super::recovery::is_durable(&r.design) == durable
        }) {
            let many = rs
                .senders
                .iter()
                .find(|r| r.senders == most && r.design == one.design && r.skipped.is_none())?;
            v.push(many.mean_ns / one.mean_ns);
        }
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        lo.is_finite().then_some((lo, hi))
    };
    let (b, d) = (growth(false)?, growth(true)?);
    Some(format!(
        "- Concurrent senders (Figure 17): from 1 to {most} senders the baselines' mean latency \
         grows {:.2}× to {:.2}×, the durable RPCs' {:.2}× to {:.2}×. The paper reports the \
         opposite trend (baselines \"increases sightly\", durable RPCs \"remain stable\", \
         §5.5); the model does not reproduce it. The hand-written section at the end of the \
         page measures why: a durable Put writes its value to PM twice (redo-log entry, then \
         object) and the durable designs run into the PM's write bandwidth; an emulated Flush \
         READ also waits for every earlier inbound DMA of the node.\n",
        b.0, b.1, d.0, d.1
    ))
}

// ------------------------------------------------------------------ claims

/// Write-based baselines the paper compares WFlush-RPC and W-RFlush-RPC with (§5.1).
pub const WRITE_BASELINES: [&str; 5] = ["L5", "RFP", "Octopus", "FaRM", "ScaleRPC"];
/// The durable RPCs built on RDMA WRITE.
pub const WRITE_DURABLE: [&str; 2] = ["WFlush-RPC", "W-RFlush-RPC"];
/// The durable RPCs built on RDMA SEND.
pub const SEND_DURABLE: [&str; 2] = ["SFlush-RPC", "S-RFlush-RPC"];

#[cfg(test)]
mod tests {
    use super::*;

    fn r(design: &str, side: &str, rp: u32, av: f64, total: f64) -> RecoveryResult {
        RecoveryResult {
            design: design.into(),
            side: side.into(),
            read_percent: rp,
            availability: av,
            rpcs: 10,
            outages: 1,
            total_s: total,
            failure_free_s: 2.0,
        }
    }

    #[test]
    fn hand_written_sections_survive_regeneration() {
        let old = format!(
            "# page\nold table\n\n{HAND_WRITTEN_BEGIN}\n## Why\nbecause\n{HAND_WRITTEN_END}\n\
             generated tail\n{HAND_WRITTEN_BEGIN}\nmore"
        );
        let new = keep_hand_written(&old, "# page\nnew table\n");
        assert_eq!(
            new,
            format!(
                "# page\nnew table\n\n{HAND_WRITTEN_BEGIN}\n## Why\nbecause\n{HAND_WRITTEN_END}\n\n\
                 {HAND_WRITTEN_BEGIN}\nmore\n"
            )
        );
        // Regenerating again changes nothing, and a page without sections is kept as is.
        assert_eq!(keep_hand_written(&new, "# page\nnew table\n"), new);
        assert_eq!(keep_hand_written("# old\n", "# new\n"), "# new\n");
    }

    /// The recovery tables of `rpc.md`, byte for byte (they share one writer).
    #[test]
    fn recovery_tables_keep_their_layout() {
        let (d, b) = ("durable (re-execute from log)", "baseline (re-send)");
        let rs = vec![
            r("WFlush-RPC", d, 50, 0.9, 3.0),
            r("WFlush-RPC", b, 50, 0.9, 4.0),
            r("WFlush-RPC", d, 50, 0.99, 2.5),
            r("WFlush-RPC", b, 50, 0.99, 2.6),
            r("SFlush-RPC", d, 95, 0.9, 3.3),
            r("SFlush-RPC", b, 95, 0.9, 3.9),
            r("SFlush-RPC", d, 95, 0.99, 2.0),
            r("DaRPC", b, 50, 0.9, 5.0),
            r("DaRPC", b, 50, 0.99, 2.2),
            r("FaRM", b, 95, 0.99, 2.1),
        ];
        assert_eq!(
            recovery_normalized(&rs),
            "| design | read:write | 90% available | 99% available |\n\
             |---|---|---|---|\n\
             | WFlush-RPC | 50:50 | 0.750 | 0.962 |\n\
             | SFlush-RPC | 95:5 | 0.846 | – |\n"
        );
        assert_eq!(
            recovery_baselines(&rs),
            "| design | read:write | 90% available | 99% available |\n\
             |---|---|---|---|\n\
             | DaRPC | 50:50 | 2.500× | 1.100× |\n\
             | FaRM | 95:5 | – | 1.050× |\n"
        );
        assert_eq!(recovery_normalized(&rs[7..]), "No durable RPC ran.\n");
    }
}

//! The evaluation's outputs, written by one function ([`write_report`]): `rpc.md` (tables
//! laid out like seed 003's figures, with every substitution and skipped cell stated),
//! `rpc.csv` and `rpc.json` (every run), and SVG bar charts (plotters).

use super::{RecoveryResult, Results, RunResult};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Designs in the order they first appear (the figures' order).
fn designs(rs: &[RunResult]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rs {
        if !out.contains(&r.design) {
            out.push(r.design.clone());
        }
    }
    out
}

/// Distinct values of `col` in order of appearance.
fn columns(rs: &[RunResult], col: &dyn Fn(&RunResult) -> String) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rs {
        let c = col(r);
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn find<'a>(
    rs: &'a [RunResult],
    design: &str,
    col: &dyn Fn(&RunResult) -> String,
    c: &str,
) -> Option<&'a RunResult> {
    rs.iter().find(|r| r.design == design && col(r) == c)
}

fn us(ns: f64) -> String {
    if ns.is_nan() {
        "–".into()
    } else {
        format!("{:.1}", ns / 1e3)
    }
}

fn size(b: u64) -> String {
    if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KB", b / 1024)
    } else {
        format!("{b} B")
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

fn recovery_table(rs: &[RecoveryResult]) -> String {
    let mut s = String::from(
        "| design | side | read % | availability | outages | total (s) | failure-free (s) | slowdown |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1}% | {} | {:.2} | {:.2} | {:.2}× |",
            r.design,
            r.side,
            r.read_percent,
            r.availability * 100.0,
            r.outages,
            r.total_s,
            r.failure_free_s,
            r.total_s / r.failure_free_s
        );
    }
    s
}

/// The results page.
pub fn markdown(rs: &Results) -> String {
    let mut s = String::new();
    let mode = if rs.quick {
        "quick mode (small N and M; shapes only)"
    } else {
        "full mode (seed 003 §5.1 sizes)"
    };
    let _ = writeln!(
        s,
        "# RPC designs of seed 003 on the simulator\n\n{mode}; seed {}, profile `{}`, server {}. \
         Baselines are the communication patterns of seed 003 Figure 2; every server persists \
         a Put (`clwb`+`sfence`) before replying. Latencies in µs of simulated time.\n",
        rs.seed, rs.profile, rs.config
    );
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
            table(&m, "design", &by_size, &|r| format!(
                "{:.1}",
                r.throughput_ops_s / 1e3
            ))
        );
        let _ = writeln!(
            s,
            "## Micro-benchmark, {load} load: p99 latency (µs) (§5.2, Figure 9)\n\n{}",
            table(&m, "design", &by_size, &|r| us(r.p99_ns as f64))
        );
    }
    let mean = |r: &RunResult| us(r.mean_ns);
    let _ = writeln!(
        s,
        "## YCSB: mean latency (µs) (§5.3, Figure 11)\n\n{}",
        table(&rs.ycsb, "design", &|r| r.workload.clone(), &mean)
    );
    let _ = writeln!(
        s,
        "## Object size: mean latency (µs) (§5.5, Figure 13)\n\n{}",
        table(&rs.sizes, "design", &by_size, &mean)
    );
    let _ = writeln!(
        s,
        "## Concurrent senders: mean latency (µs) (§5.5, Figure 17)\n\n{}",
        table(&rs.senders, "senders", &|r| r.senders.to_string(), &mean)
    );
    let _ = writeln!(
        s,
        "## Read:write ratio: mean latency (µs) (§5.5, Figure 18)\n\n{}",
        table(
            &rs.read_write,
            "design",
            &|r| format!("{}:{}", r.read_percent, 100 - r.read_percent),
            &mean
        )
    );
    let _ = writeln!(
        s,
        "## Batch size: total execution time (ms) (§5.5, Figure 19)\n\n{}",
        table(
            &rs.batch,
            "requests per RPC",
            &|r| r.batch.to_string(),
            &|r| { format!("{:.3}", r.elapsed_ns as f64 / 1e6) }
        )
    );
    let _ = writeln!(
        s,
        "## Failure recovery: total execution time (§5.4, Figure 12)\n\n\
         A timeline model fed with each design's simulated read and write latencies (see \
         `bench::recovery`): 300 ms restarts, 100 ms re-transfer interval. Durable RPCs add \
         their rows once they are wired in.\n\n{}",
        recovery_table(&rs.recovery)
    );
    let _ = writeln!(
        s,
        "## Notes\n\n{}         - Busy polling of memory (FaRM, HERD, L5, RFP's server, ScaleRPC) probes every          `cpu.poll_ns`, and 4 × `cpu.poll_ns` apart after 5 µs of waiting, so noticing a          message late by at most 0.4 µs after long waits (`baselines::Polling`).\n         - Only objects the operation streams touch are preloaded; untouched objects change          no measurement.\n         - FaSST's 4 KB UD MTU is applied to object bytes (values, scan results, batches);          cell and frame headers are not counted against it.\n         - A batched RPC's latency is recorded once per RPC; its operations share it equally          in the read/write means.",
        notes(rs)
    );
    s
}

/// Every run as CSV.
pub fn csv(rs: &Results) -> String {
    let mut s = String::from(
        "experiment,design,workload,object_bytes,senders,batch,load,read_percent,config,ops,rpcs,elapsed_ns,throughput_ops_s,mean_ns,p50_ns,p99_ns,max_ns,read_mean_ns,write_mean_ns,reads_checked,events,fingerprint,transport_note,skipped\n",
    );
    for r in rs.runs() {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{},{},{},{:.1},{:.1},{},{},{:#018x},{},{}",
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
        out.push((
            format!("rpc-micro-{load}.svg"),
            bars(
                &format!("Micro-benchmark throughput, {load} load (seed 003 Figure 8)"),
                &m,
                &by_size,
                &|r| r.throughput_ops_s / 1e3,
                "Kops/s",
            )?,
        ));
    }
    let mean = |r: &RunResult| r.mean_ns / 1e3;
    out.push((
        "rpc-ycsb.svg".into(),
        bars(
            "YCSB mean latency (seed 003 Figure 11)",
            &rs.ycsb,
            &|r| r.workload.clone(),
            &mean,
            "µs",
        )?,
    ));
    out.push((
        "rpc-sizes.svg".into(),
        bars(
            "Mean latency by object size (seed 003 Figure 13)",
            &rs.sizes,
            &by_size,
            &mean,
            "µs",
        )?,
    ));
    out.push((
        "rpc-senders.svg".into(),
        bars(
            "Mean latency by concurrent senders (seed 003 Figure 17)",
            &rs.senders,
            &|r| r.senders.to_string(),
            &mean,
            "µs",
        )?,
    ));
    out.push((
        "rpc-read-write.svg".into(),
        bars(
            "Mean latency by read:write ratio (seed 003 Figure 18)",
            &rs.read_write,
            &|r| format!("{}:{}", r.read_percent, 100 - r.read_percent),
            &mean,
            "µs",
        )?,
    ));
    out.push((
        "rpc-batch.svg".into(),
        bars(
            "Total execution time by batch size (seed 003 Figure 19)",
            &rs.batch,
            &|r| r.batch.to_string(),
            &|r| r.elapsed_ns as f64 / 1e6,
            "ms",
        )?,
    ));
    Ok(out)
}

/// Writes `rpc.md`, `rpc.csv`, `rpc.json` and the `rpc-*.svg` plots into `dir` (created if
/// missing); returns the paths written.
pub fn write_report(rs: &Results, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = vec![
        ("rpc.md".to_string(), markdown(rs)),
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

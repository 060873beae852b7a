//! `remora bench rpc`: seed 003's evaluation (§5) of the eight baseline RPC designs and the
//! four durable RPCs on the simulator, written as `rpc.md`, `rpc.csv`, `rpc.json` and SVG
//! plots, and optionally as the results page `docs/results/rpc.md` (with the paper's claims
//! beside the model's, computed from the results).

use remora_model::profile::LatencyProfile;
use remora_model::time::Duration;
use remora_rpc::baselines::BASELINES;
use remora_rpc::bench::{self, BenchOptions, Progress, Results, RunResult, Set};
use remora_rpc::{Design, FlushForm};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Settings of `remora bench rpc`.
#[derive(Clone, Debug)]
pub struct RpcBenchArgs {
    /// Quick mode (CI): small sizes.
    pub quick: bool,
    /// Full mode's sizes divided by this (1 = the paper's).
    pub divisor: u64,
    /// Designs to run.
    pub designs: Vec<Design>,
    /// Experiment sets to run.
    pub sets: Vec<Set>,
    /// Worker threads.
    pub threads: usize,
    /// Flush form of the durable RPCs.
    pub flush: FlushForm,
    /// Heavy-load processing per request, µs.
    pub processing_us: u64,
    /// Server worker threads of every design.
    pub server_threads: u32,
    /// Busy link (Figure 14): offered load, percent of the link bandwidth.
    pub net_load_percent: u32,
    /// Busy CPU (Figures 15-16): the background program's share, percent.
    pub cpu_load_percent: u32,
    /// Busy CPU (Figures 15-16): mean scheduling period, µs.
    pub cpu_period_us: u64,
    /// Seed.
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Where rpc.md, rpc.csv, rpc.json and the plots go.
    pub out: PathBuf,
    /// Also write the results page here, with its data and plots beside it.
    pub results_page: Option<PathBuf>,
    /// The command, printed on the page.
    pub command: String,
}

impl RpcBenchArgs {
    /// Quick mode, all twelve designs, one thread, output in `out`.
    pub fn quick(out: PathBuf) -> Self {
        RpcBenchArgs {
            quick: true,
            divisor: 1,
            designs: Design::ALL.to_vec(),
            sets: Set::ALL.to_vec(),
            threads: 1,
            flush: FlushForm::Emulated,
            processing_us: 100,
            server_threads: remora_rpc::bench::SERVER_THREADS,
            net_load_percent: 100,
            cpu_load_percent: remora_rpc::bench::CPU_LOAD.percent,
            cpu_period_us: remora_rpc::bench::CPU_LOAD.period.as_nanos() / 1000,
            seed: 3,
            profile: LatencyProfile::default_profile(),
            out,
            results_page: None,
            command: String::new(),
        }
    }

    /// The benchmark options these arguments give.
    pub fn options(&self) -> BenchOptions {
        let base = if self.quick {
            BenchOptions::quick()
        } else {
            BenchOptions::full()
        };
        BenchOptions {
            seed: self.seed,
            profile: self.profile.clone(),
            threads: self.threads.max(1),
            designs: self.designs.clone(),
            sets: self.sets.clone(),
            flush: self.flush,
            heavy_processing: Duration::from_micros(self.processing_us),
            server_threads: self.server_threads.max(1),
            divisor: self.divisor.max(1),
            net_load: remora_rpc::harness::NetLoad::busy(self.net_load_percent.max(1)),
            cpu_load: remora_rpc::bench::CpuLoad {
                percent: self.cpu_load_percent.clamp(1, 99),
                period: Duration::from_micros(self.cpu_period_us.max(1)),
            },
            ..base
        }
    }
}

/// Parses a comma-separated design list: names (case-insensitive) or `all`, `baselines`,
/// `durable`.
pub fn parse_designs(s: &str) -> Result<Vec<Design>, String> {
    let mut out: Vec<Design> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add: Vec<Design> = match part.to_ascii_lowercase().as_str() {
            "all" => Design::ALL.to_vec(),
            "baselines" => BASELINES.to_vec(),
            "durable" => Design::ALL
                .into_iter()
                .filter(|d| d.is_durable_rpc())
                .collect(),
            _ => vec![part.parse::<Design>()?],
        };
        for d in add {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    if out.is_empty() {
        return Err("no design given".into());
    }
    Ok(out)
}

/// Parses a comma-separated list of experiment sets, or `all`.
pub fn parse_sets(s: &str) -> Result<Vec<Set>, String> {
    let mut out: Vec<Set> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add = match part.to_ascii_lowercase().as_str() {
            "all" => Set::ALL.to_vec(),
            name => vec![name.parse::<Set>()?],
        };
        for x in add {
            if !out.contains(&x) {
                out.push(x);
            }
        }
    }
    if out.is_empty() {
        return Err("no experiment set given".into());
    }
    // Run in the evaluation's order whatever order they were named in.
    out.sort_by_key(|x| Set::ALL.iter().position(|y| y == x));
    Ok(out)
}

/// Parses `emulated` or `native`.
pub fn parse_flush(s: &str) -> Result<FlushForm, String> {
    match s {
        "emulated" => Ok(FlushForm::Emulated),
        "native" => Ok(FlushForm::Native),
        _ => Err(format!("unknown flush form {s:?}: emulated or native")),
    }
}

/// Runs every experiment set and writes the outputs; `progress(done, total)` after every
/// run.
#[allow(clippy::disallowed_methods)] // the wall clock times the run for the page, not simulated time
pub fn run(
    args: &RpcBenchArgs,
    progress: Arc<dyn Fn(usize, usize) + Send + Sync>,
) -> Result<Results, String> {
    // A file that is not the page, or not its data, is refused before a run, not
    // overwritten after it.
    if let Some(page) = &args.results_page {
        crate::check_results_page(page, bench::report::RESULTS_TITLE)?;
        crate::check_results_siblings(page, &results_siblings(&args.sets))?;
    }
    let mut o = args.options();
    let total = o.total_runs();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    o.progress = Some(Progress(Arc::new(move |_: &RunResult| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        progress(n, total);
    })));
    let t0 = std::time::Instant::now();
    let mut rs = bench::run_all(&o);
    rs.wall_s = t0.elapsed().as_secs_f64();
    rs.command = args.command.clone();
    bench::write_report(&rs, &args.out)
        .map_err(|e| format!("cannot write to {}: {e}", args.out.display()))?;
    if let Some(page) = &args.results_page {
        write_page(&rs, page)?;
    }
    Ok(rs)
}

/// The plots `bench rpc --results PAGE` writes beside the page, each with the experiment
/// set that draws it ([`bench::report::svgs`]; a set that did not run draws none).
const PLOTS: [(Set, &str); 14] = [
    (Set::Micro, "rpc-micro-heavy.svg"),
    (Set::Micro, "rpc-micro-light.svg"),
    (Set::Micro, "rpc-p99-heavy.svg"),
    (Set::Micro, "rpc-p99-light.svg"),
    (Set::PageRank, "rpc-pagerank.svg"),
    (Set::Ycsb, "rpc-ycsb.svg"),
    (Set::Sizes, "rpc-sizes.svg"),
    (Set::Senders, "rpc-senders.svg"),
    (Set::ReadWrite, "rpc-read-write.svg"),
    (Set::Load, "rpc-net-load.svg"),
    (Set::Load, "rpc-server-cpu.svg"),
    (Set::Load, "rpc-sender-cpu.svg"),
    (Set::Breakdown, "rpc-breakdown.svg"),
    (Set::Batch, "rpc-batch.svg"),
];

/// The files `bench rpc --results PAGE` writes beside the page when `sets` run, each known
/// by how it begins: the CSV header, the JSON's first key, a plot's size and a caption
/// citing a figure of seed 003.
pub fn results_siblings(sets: &[Set]) -> Vec<crate::Sibling> {
    let mut v = vec![
        crate::Sibling {
            name: "rpc.csv",
            starts: "experiment,design,workload,object_bytes,senders,",
            holds: "",
        },
        crate::Sibling {
            name: "rpc.json",
            starts: "{\n  \"quick\": ",
            holds: "",
        },
    ];
    v.extend(
        PLOTS
            .iter()
            .filter(|(set, _)| sets.contains(set))
            .map(|&(_, name)| crate::Sibling {
                name,
                starts: "<svg width=\"1100\" height=\"480\" viewBox=\"0 0 1100 480\" ",
                holds: "(seed 003 Figure",
            }),
    );
    v
}

/// Writes the results page at `page` with the data and plots in its directory; the
/// hand-written sections of the page it replaces are kept (`keep_hand_written`).
pub fn write_page(rs: &Results, page: &Path) -> Result<(), String> {
    let dir = crate::page_dir(page);
    let old = std::fs::read_to_string(page).unwrap_or_default();
    // Only the page and [`results_siblings`]: an `rpc.md` beside a page of another name
    // is not this command's to write.
    bench::report::write_data(rs, dir)
        .map_err(|e| format!("cannot write to {}: {e}", dir.display()))?;
    let text = bench::report::markdown(rs);
    std::fs::write(page, bench::report::keep_hand_written(&old, &text))
        .map_err(|e| format!("cannot write {}: {e}", page.display()))
}

/// A one-paragraph summary for the terminal: every claim and its verdict.
pub fn summary(rs: &Results) -> String {
    let mut s = String::new();
    for c in bench::report::claims(rs) {
        s.push_str(&format!(
            "- {}: paper {}, model {} ({})\n",
            c.what, c.paper, c.model, c.verdict
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn designs_and_flush_forms_parse() {
        assert_eq!(parse_designs("all").unwrap().len(), 12);
        assert_eq!(parse_designs("baselines").unwrap().len(), 8);
        assert_eq!(
            parse_designs("durable,DaRPC").unwrap(),
            vec![
                Design::SRFlushRpc,
                Design::SFlushRpc,
                Design::WRFlushRpc,
                Design::WFlushRpc,
                Design::DaRpc
            ]
        );
        assert!(parse_designs("nope").is_err());
        assert_eq!(parse_flush("native").unwrap(), FlushForm::Native);
        assert!(parse_flush("x").is_err());
    }

    #[test]
    fn sets_parse_in_evaluation_order() {
        assert_eq!(parse_sets("all").unwrap(), Set::ALL.to_vec());
        assert_eq!(
            parse_sets("breakdown, micro,micro").unwrap(),
            vec![Set::Micro, Set::Breakdown]
        );
        let e = parse_sets("micro,nope").unwrap_err();
        assert!(e.contains("nope") && e.contains("read-write"), "{e}");
        assert!(parse_sets(" , ").is_err());
    }

    /// Every set runs as many simulations as [`BenchOptions::total_runs`] counts for it
    /// (the progress bar's length; the counts are written beside the sets' loops).
    #[test]
    fn each_set_runs_the_count_the_progress_bar_expects() {
        let dir = tempfile::Builder::new()
            .prefix("remora-set-counts-")
            .tempdir()
            .unwrap();
        for set in Set::ALL {
            let mut args = RpcBenchArgs::quick(dir.path().to_path_buf());
            args.designs = vec![Design::WFlushRpc];
            args.sets = vec![set];
            let expected = args.options().total_runs();
            let rs = run(&args, Arc::new(|_, _| {})).unwrap();
            let replays = rs.replay.len();
            assert_eq!(rs.runs().count() + replays, expected, "{}", set.name());
        }
    }

    /// The files a set's page has beside it are the ones checked before a run, and each is
    /// known as this command's own output when the page is written again.
    #[test]
    fn each_set_writes_beside_its_page_only_the_files_it_checks() {
        let scratch = tempfile::Builder::new()
            .prefix("remora-set-siblings-")
            .tempdir()
            .unwrap();
        for set in Set::ALL {
            let dir = scratch.path().join(set.name());
            let page = dir.join("page.md");
            let mut args = RpcBenchArgs::quick(scratch.path().join("out"));
            args.designs = vec![Design::WFlushRpc];
            args.sets = vec![set];
            args.results_page = Some(page.clone());
            run(&args, Arc::new(|_, _| {})).unwrap();
            let mut written: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "page.md")
                .collect();
            written.sort();
            let mut checked: Vec<String> = results_siblings(&[set])
                .iter()
                .map(|s| s.name.to_string())
                .collect();
            checked.sort();
            assert_eq!(written, checked, "{}", set.name());
            crate::check_results_siblings(&page, &results_siblings(&[set])).unwrap();
        }
    }

    /// A part of the evaluation runs just its sets, as many runs as the progress bar
    /// expects, and its page says which sets ran and leaves the rest empty.
    #[test]
    fn a_part_of_the_evaluation_runs_only_its_sets() {
        let scratch = tempfile::Builder::new()
            .prefix("remora-sets-")
            .tempdir()
            .unwrap();
        let dir = scratch.path();
        let mut args = RpcBenchArgs::quick(dir.to_path_buf());
        args.designs = vec![Design::DaRpc, Design::WFlushRpc];
        args.sets = vec![Set::Micro, Set::Breakdown];
        let expected = args.options().total_runs();
        let rs = run(&args, Arc::new(|_, _| {})).unwrap();
        assert_eq!(rs.runs().count(), expected);
        assert_eq!(expected, 2 * (6 + 1));
        assert_eq!(rs.micro.len(), 12);
        assert!(rs.ycsb.is_empty() && rs.read_write.is_empty() && rs.replay.is_empty());
        let page = std::fs::read_to_string(dir.join("rpc.md")).unwrap();
        assert!(page.contains("only the experiment sets micro, breakdown ran"));
        assert!(page.contains("Not run in this evaluation"));
        assert!(
            !page.contains("](rpc-ycsb.svg)"),
            "a set that did not run has no plot"
        );
        assert!(page.contains("](rpc-micro-heavy.svg)"));
        assert!(
            !page.contains("](rpc-net-load.svg)"),
            "nor has a load study"
        );
        assert!(page.contains("](rpc-breakdown.svg)"));
        assert!(dir.join("rpc-breakdown.svg").exists());
        assert!(
            !dir.join("rpc-net-load.svg").exists(),
            "a set that did not run gets no plot"
        );
        assert!(
            !page.contains("| design | idle | busy | change |"),
            "a load study that did not run has no table"
        );
        assert!(
            !page.contains("Replay cost per logged request"),
            "nor has the recovery model, which the read:write set feeds"
        );
    }
}

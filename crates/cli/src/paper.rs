//! The seed 000 commands: the taxonomy tables, the planner's explanation, the RemoteLog
//! evaluation (Figure 2) and the crash checker.

use remora::planner;
use remora::{Scenario, Shape, Taxonomy, Update};
use remora_model::profile::LatencyProfile;
use remora_model::ServerConfig;
use remora_remotelog::check::{self, CheckOptions, CheckReport, Target};
use remora_remotelog::eval::{run_all, EvalOptions, ScenarioResult};
use remora_remotelog::report::{self, RunInfo};
use remora_remotelog::LogShape;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Tables 2 and 3 of seed 000, generated from `taxonomy/methods.toml`.
pub fn taxonomy() -> String {
    let t = Taxonomy::shipped();
    let mut s = String::from("# Remote persistence taxonomy (seed 000 Tables 2 and 3)\n\nGenerated from taxonomy/methods.toml. Rq = requester, Rsp = responder, Comp = completion.\n\n");
    s.push_str(&t.markdown(Update::Singleton));
    s.push('\n');
    s.push_str(&t.markdown(Update::Compound));
    s.push_str("\n### Rules from the text (applied by the library)\n\n");
    s.push_str("- iWARP under WSP: a completion does not prove arrival, so the MHP method (with FLUSH) is used (§3.2).\n");
    s.push_str("- A compound `b` longer than 8 bytes, or an RNIC without ATOMIC WRITE: `write-flush-wait-write-flush` (§3.3).\n");
    s.push_str("- An RNIC without FLUSH: FLUSH is emulated by an RDMA READ (§3.4); correct wherever the tables use FLUSH.\n");
    s.push_str("- Footnote ∗: under DMP without DDIO a SEND/ack exchange (`write-msg`, `write-msg-2`) may replace FLUSH.\n");
    s
}

/// The longest compound `b` the planner's simulated server can carry: its 1 MiB region
/// holds `b` first, then the 1,024 64-byte records [`planner::predict`] cycles through.
pub const MAX_B_LEN: u64 = (1 << 20) - 1024 * 64;

/// The planner's ranking and choice for a server, as text; an error when no correct
/// method can carry the update (never an empty plan).
pub fn plan(
    config: &ServerConfig,
    update: Update,
    b_len: u64,
    profile: &LatencyProfile,
) -> Result<String, String> {
    if update == Update::Compound && !(1..=MAX_B_LEN).contains(&b_len) {
        return Err(format!(
            "--b-len {b_len}: a compound update's second part must be 1 to {MAX_B_LEN} bytes"
        ));
    }
    let ranked = planner::plan(config, update, Shape { b_len }, profile);
    if ranked.is_empty() {
        return Err(format!(
            "no correct method for {config} could persist a {} update (--b-len {b_len}) \
             on the simulator",
            update.name()
        ));
    }
    Ok(planner::render(config, update, profile, &ranked))
}

/// The data and plot `remora remotelog --results PAGE` writes beside the page, each known
/// by how it begins: the CSV header, the JSON's first key, the plot's size and first caption.
pub const RESULTS_SIBLINGS: [crate::Sibling; 3] = [
    crate::Sibling {
        name: "remotelog.csv",
        starts: "scenario,update,config,primitive,method,appends,mean_ns,",
        holds: "",
    },
    crate::Sibling {
        name: "remotelog.json",
        starts: "[\n  {\n    \"scenario\": \"",
        holds: "",
    },
    crate::Sibling {
        name: "remotelog.svg",
        starts: "<svg width=\"1500\" height=\"800\" viewBox=\"0 0 1500 800\" ",
        holds: "(a) singleton, DMP",
    },
];

/// Settings of `remora remotelog`.
#[derive(Clone, Debug)]
pub struct RemoteLogArgs {
    /// Appends per scenario.
    pub appends: u64,
    /// Seed.
    pub seed: u64,
    /// Profile name or path (for the report).
    pub profile_name: String,
    /// Profile.
    pub profile: LatencyProfile,
    /// Worker threads.
    pub threads: usize,
    /// Where CSV, JSON, SVG and the Figure 2 tables go.
    pub out: PathBuf,
    /// Also write the results page (docs/results/remotelog.md) here.
    pub results_page: Option<PathBuf>,
    /// The command line, printed on the results page.
    pub command: String,
}

/// Runs the evaluation and writes its outputs. Returns the results.
pub fn remotelog(
    args: &RemoteLogArgs,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<ScenarioResult>, String> {
    let opts = EvalOptions {
        appends: args.appends,
        seed: args.seed,
        profile: args.profile.clone(),
        shape: LogShape::default(),
        threads: args.threads,
    };
    // A file that is not the page, or not its data, is refused before a run, not
    // overwritten after it.
    if let Some(page) = &args.results_page {
        crate::check_results_page(page, report::RESULTS_TITLE)?;
        crate::check_results_siblings(page, &RESULTS_SIBLINGS)?;
    }
    let rs = run_all(&opts, &Scenario::all(), progress)?;
    write_outputs(&rs, args)?;
    Ok(rs)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write_outputs(rs: &[ScenarioResult], args: &RemoteLogArgs) -> Result<(), String> {
    write(&args.out.join("remotelog.csv"), &report::csv(rs))?;
    write(&args.out.join("remotelog.json"), &report::json(rs))?;
    write(&args.out.join("remotelog.svg"), &report::svg(rs)?)?;
    write(&args.out.join("figure2.md"), &report::figure2_markdown(rs))?;
    if let Some(page) = &args.results_page {
        let info = RunInfo {
            command: args.command.clone(),
            appends: args.appends,
            seed: args.seed,
            profile: args.profile_name.clone(),
        };
        write(page, &report::results_page(rs, &info))?;
        // The plot and data sit beside the page, as the page says ([`RESULTS_SIBLINGS`]).
        let dir = crate::page_dir(page);
        write(&dir.join("remotelog.svg"), &report::svg(rs)?)?;
        write(&dir.join("remotelog.csv"), &report::csv(rs))?;
        write(&dir.join("remotelog.json"), &report::json(rs))?;
    }
    Ok(())
}

/// Which targets `remora crashcheck` runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CrashSelection {
    /// The 72 scenarios.
    pub scenarios: bool,
    /// The text's alternatives, READ-emulated FLUSH and iWARP.
    pub variants: bool,
    /// The wrong methods that must be caught.
    pub negative: bool,
    /// The 72 scenarios with RemoteLog's ring reused, and the wrong collector that must be
    /// caught ([`check::reuse_targets`]).
    pub reuse: bool,
}

/// Runs the crash checker; returns the reports (in target order).
pub fn crashcheck(
    sel: CrashSelection,
    opts: &CheckOptions,
    filter: Option<&str>,
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<CheckReport>, String> {
    let mut targets: Vec<Target> = Vec::new();
    if sel.scenarios {
        targets.extend(check::scenario_targets());
    }
    if sel.variants {
        targets.extend(check::variant_targets());
    }
    if sel.negative {
        targets.extend(check::negative_controls());
    }
    if sel.reuse {
        targets.extend(check::reuse_targets());
    }
    if let Some(f) = filter {
        targets.retain(|t| t.name.contains(f));
    }
    if targets.is_empty() {
        return Err("no checker target matches".into());
    }
    remora_remotelog::eval::parallel_map(&targets, threads, progress, |t| check::check(t, opts))
        .into_iter()
        .collect()
}

/// The checker's reports as a Markdown table.
pub fn crashcheck_table(rs: &[CheckReport]) -> String {
    let mut s = String::from("| target | method | kind | crash points | violations | result |\n|---|---|---|---|---|---|\n");
    for r in rs {
        let kind = remora_sim::crashcheck::kind_cell(r.wrong, "correct method");
        let result = remora_sim::crashcheck::result_cell(
            r.wrong,
            r.violations,
            r.example.as_deref(),
            "**FAIL** wrong method not caught",
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            r.name, r.method, kind, r.crash_points, r.violations, result
        );
    }
    let failed = rs.iter().filter(|r| !r.passed()).count();
    let _ = writeln!(
        s,
        "\n{} targets, {} crash points, {} failed",
        rs.len(),
        rs.iter().map(|r| r.crash_points).sum::<u64>(),
        failed
    );
    s
}

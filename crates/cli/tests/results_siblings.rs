//! `remotelog --results PAGE` and `bench rpc --results PAGE` write data and plots beside
//! the page (`remotelog.csv`, `rpc-ycsb.svg`, ...). A file of such a name that is not an
//! earlier output of the command is refused before the run, as a foreign page is, and kept
//! byte for byte; the command's own earlier output is rewritten, as the page is.

mod common;
use common::{results_run as run, scratch, text};
use std::path::Path;

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn results_refuse_a_foreign_file_beside_the_page() {
    // `refused` is false for a name this run does not write beside the page: the plot of
    // a set that does not run (only micro runs), and `rpc.md`, which `bench rpc` used to
    // write beside a page of another name, then delete: a foreign one was lost.
    for (cmd, name, refused) in [
        ("remotelog", "remotelog.csv", true),
        ("remotelog", "remotelog.json", true),
        ("remotelog", "remotelog.svg", true),
        ("rpc", "rpc.csv", true),
        ("rpc", "rpc.json", true),
        ("rpc", "rpc-micro-heavy.svg", true),
        ("rpc", "rpc-p99-light.svg", true),
        ("rpc", "rpc-ycsb.svg", false),
        ("rpc", "rpc.md", false),
    ] {
        let dir = scratch("results-siblings");
        let results = dir.path().join("results");
        std::fs::create_dir(&results).unwrap();
        let foreign = results.join(name);
        let mine = "my own notes, not a remora output\n";
        std::fs::write(&foreign, mine).unwrap();
        let o = run(cmd, &dir.path().join("out"), &results.join("page.md"));
        let err = text(&o.stderr);
        let kept = std::fs::read_to_string(&foreign).unwrap_or_else(|e| format!("({e})"));
        assert!(kept == mine, "{cmd}: {name} overwritten or removed");
        if !refused {
            assert!(o.status.success(), "{cmd} beside {name}: {err}");
            continue;
        }
        assert!(
            !o.status.success(),
            "{cmd}: succeeded beside a foreign {name}"
        );
        assert_ne!(o.status.code(), Some(101), "{cmd}: {err}");
        assert!(
            err.contains(name) && err.contains("not one this command wrote"),
            "{cmd}: unclear error: {err}"
        );
        // Refused before the run: nothing written beside it, nor the output directory.
        assert_eq!(names(&results), vec![name.to_string()], "{cmd}");
        assert!(!dir.path().join("out").exists(), "{cmd}: ran");
    }
}

#[test]
fn results_rewrite_their_own_data_from_an_earlier_run() {
    for cmd in ["remotelog", "rpc"] {
        let dir = scratch("results-siblings");
        let results = dir.path().join("results");
        let page = results.join("page.md");
        let first = run(cmd, &dir.path().join("out"), &page);
        assert!(first.status.success(), "{cmd}: {}", text(&first.stderr));
        let written = names(&results);
        assert!(written.len() > 2, "{cmd}: {written:?}");
        // An earlier run's data: the same kind of file with other numbers in it.
        let data: Vec<&String> = written.iter().filter(|n| *n != "page.md").collect();
        for name in &data {
            let p = results.join(name);
            let mut t = std::fs::read_to_string(&p).unwrap();
            t.push_str("stale\n");
            std::fs::write(&p, t).unwrap();
        }
        let again = run(cmd, &dir.path().join("out"), &page);
        assert!(again.status.success(), "{cmd}: {}", text(&again.stderr));
        assert_eq!(names(&results), written, "{cmd}");
        for name in &data {
            let t = std::fs::read_to_string(results.join(name)).unwrap();
            assert!(!t.ends_with("stale\n"), "{cmd}: {name} not rewritten");
        }
    }
}

#[test]
fn the_shipped_pages_data_are_known_as_their_commands_own() {
    // Regenerating docs/results must not be refused by the files it wrote last time.
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
    remora_cli::check_results_siblings(
        &docs.join("remotelog.md"),
        &remora_cli::paper::RESULTS_SIBLINGS,
    )
    .unwrap();
    let all = remora_rpc::bench::Set::ALL;
    remora_cli::check_results_siblings(
        &docs.join("rpc.md"),
        &remora_cli::rpcbench::results_siblings(&all),
    )
    .unwrap();
}

/// A page named as one of its data files would be written over by that data once the run
/// is done: refused before the run, and nothing is written.
#[test]
fn results_refuse_a_page_named_as_its_data() {
    for (cmd, name) in [("remotelog", "remotelog.csv"), ("rpc", "rpc.json")] {
        let dir = scratch("results-page-as-data");
        let page = dir.path().join(name);
        let out = run(cmd, &dir.path().join("out"), &page);
        assert!(!out.status.success(), "{cmd} --results {name} ran");
        let e = text(&out.stderr);
        assert!(e.contains("name the page otherwise"), "{cmd}: {e}");
        assert!(!page.exists(), "{cmd}: {name} was written");
    }
}

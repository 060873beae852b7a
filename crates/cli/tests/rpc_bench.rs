//! `remora bench rpc --quick` through the built binary: every experiment set runs for
//! baselines and durable RPCs, the outputs and the results page are written, and the page
//! states the command, the sizes, the substitutions and the paper's claims.

use std::process::Command;

#[test]
fn quick_mode_writes_outputs_and_the_results_page() {
    let scratch = tempfile::Builder::new()
        .prefix("remora-rpc-bench-")
        .tempdir()
        .unwrap();
    let dir = scratch.path();
    let out = dir.join("out");
    let page = dir.join("results").join("rpc.md");
    let run = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "bench",
            "rpc",
            "--quick",
            "--threads",
            "2",
            "--designs",
            "FaRM,DaRPC,HERD,durable",
            "--out",
            out.to_str().unwrap(),
            "--results",
            page.to_str().unwrap(),
        ])
        .output()
        .expect("run remora");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("WFlush-RPC and W-RFlush-RPC"), "{stdout}");
    for f in [
        "rpc.md",
        "rpc.csv",
        "rpc.json",
        "rpc-micro-light.svg",
        "rpc-ycsb.svg",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let md = std::fs::read_to_string(&page).unwrap();
    assert!(
        md.contains("remora bench rpc --quick"),
        "command missing:\n{md}"
    );
    assert!(md.contains("**Quick mode**"));
    // HERD and FaSST run on the model's UC/UD queue pairs: no transport substitution.
    assert!(
        !md.contains("run over RC"),
        "stale substitution note:\n{md}"
    );
    assert!(md.contains("## The paper's claims beside the model's"));
    assert!(md.contains("**emulated** Flush primitives"));
    for d in ["SFlush-RPC", "WFlush-RPC", "S-RFlush-RPC", "W-RFlush-RPC"] {
        assert!(md.contains(&format!("| {d} | ")), "{d} missing");
    }
    let csv = std::fs::read_to_string(page.with_file_name("rpc.csv")).unwrap();
    let failed: Vec<&str> = csv.lines().filter(|l| l.contains("failed:")).collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn unknown_designs_and_flush_forms_are_refused() {
    for args in [
        ["bench", "rpc", "--designs", "NoSuchRPC"],
        ["bench", "rpc", "--flush", "magic"],
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(args)
            .output()
            .expect("run remora");
        assert!(!run.status.success());
    }
}

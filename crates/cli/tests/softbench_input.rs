//! `bench soft` with counts that leave nothing to measure: refused with a clear error
//! before anything is started, and nothing left behind.

mod common;
use common::{remora, scratch, text};

#[test]
fn bench_soft_refuses_zero_samples_and_leaves_nothing_behind() {
    let cases: [&[&str]; 3] = [
        &["--n", "0", "--stream", "10", "--scenarios", "latency"],
        &["--n", "10", "--stream", "0", "--scenarios", "latency"],
        &["--stream-only", "--stream", "0"],
    ];
    for args in cases {
        let dir = scratch("bench-soft-zero");
        let mut all = vec!["bench", "soft", "--pool-dir", dir.path().to_str().unwrap()];
        all.extend_from_slice(args);
        let out = remora(&all);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            !out.status.success(),
            "{args:?}: accepted, reported:\n{stdout}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.contains("must be at least 1"), "{args:?}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "{args:?}: left behind {left:?}");
    }
}

//! `remotelog --results PATH` and `bench rpc --results PATH` write a generated page: they
//! create a missing one and rewrite their own, but refuse a file that is not one of their
//! pages (a typo naming a source file), before the run, leaving it and its directory as
//! they were.

mod common;
use common::{results_run as run, scratch, text};
use std::path::Path;

#[test]
fn results_refuse_a_file_that_is_not_their_page() {
    for cmd in ["remotelog", "rpc"] {
        let dir = scratch("results-pages");
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let page = src.join("main.rs");
        let source = "fn main() {\n    println!(\"mine\");\n}\n";
        std::fs::write(&page, source).unwrap();
        let o = run(cmd, &dir.path().join("out"), &page);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{cmd}: overwrote {}", page.display());
        assert_ne!(o.status.code(), Some(101), "{cmd}: {err}");
        assert!(
            err.contains("main.rs") && err.contains("not"),
            "{cmd}: unclear error: {err}"
        );
        assert_eq!(std::fs::read_to_string(&page).unwrap(), source, "{cmd}");
        // Refused before the run: nothing written beside the file either.
        let beside: Vec<_> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(beside, vec!["main.rs"], "{cmd}");
    }
}

#[test]
fn results_create_a_missing_page_and_rewrite_their_own() {
    for cmd in ["remotelog", "rpc"] {
        let dir = scratch("results-pages");
        let page = dir.path().join("results").join("page.md");
        let first = run(cmd, &dir.path().join("out"), &page);
        assert!(first.status.success(), "{cmd}: {}", text(&first.stderr));
        let title = |p: &Path| {
            let page = std::fs::read_to_string(p).unwrap();
            page.lines().next().unwrap_or_default().to_string()
        };
        let generated = title(&page);
        assert!(generated.starts_with("# "), "{cmd}: {generated}");
        let again = run(cmd, &dir.path().join("out"), &page);
        assert!(again.status.success(), "{cmd}: {}", text(&again.stderr));
        assert_eq!(title(&page), generated, "{cmd}");
    }
}

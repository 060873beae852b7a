//! Helpers the integration tests of the `remora` binary share.
// Each test file uses its own part of them.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs the built `remora` binary with `args` to completion.
pub fn remora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .output()
        .expect("run remora")
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory `<tmp>/remora-<name>-XXXXXX`, removed with everything in it when
/// dropped, however the test ends (a failed assertion included): tests leave nothing behind.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("remora-{name}-"))
        .tempdir()
        .expect("create a scratch directory")
}

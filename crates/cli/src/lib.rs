//! # remora-cli: the `remora` command as a library
//!
//! The binary (`src/main.rs`) only parses arguments and prints; every scenario lives here so
//! tests can run it without a process:
//!
//! - [`configs`]: the twelve server configurations of seed 000 Table 1, explained.
//! - [`profiles`]: finding a latency profile by built-in name or file.
//! - [`demo`]: the README's main command: singleton log appends with RDMA WRITE + RDMA
//!   FLUSH on the deterministic simulator, their latency, and a power-failure check.
//! - [`bench`](mod@bench): how fast the simulator itself runs (wall clock).
//! - [`rpcbench`]: seed 003's evaluation of the RPC designs (`remora bench rpc`).
//! - [`paper`]: seed 000: the taxonomy tables, the planner, RemoteLog (Figure 2) and the
//!   crash checker.
//! - [`real`]: the soft RNIC: `serve`, RemoteLog against a server, the real SIGKILL loop.
//! - [`rpcreal`]: seed 003's durable RPCs on the soft RNIC: `rpc-serve`, `rpc`, and their
//!   real SIGKILL loop (`rpc-crashcheck`).
//! - [`killloop`]: what both real SIGKILL loops share: server processes, timed kills,
//!   scratch directories, target selection.

pub mod bench;
pub mod configs;
pub mod demo;
pub mod interrupt;
pub mod killloop;
pub mod paper;
pub mod profiles;
pub mod real;
pub mod rpcbench;
pub mod rpcreal;
pub mod softbench;
pub mod takeover;

/// Checks, before a run, that a results page may be written at `path`: the file is missing
/// (it is created) or is a page of the same command, whose first line is `title`. Any other
/// file (a typo naming a source file) is refused, not overwritten.
pub fn check_results_page(path: &std::path::Path, title: &str) -> Result<(), String> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "--results {}: cannot read it to check that it is a generated page: {e}",
            path.display()
        )),
        Ok(bytes) if first_line(&bytes) == title.as_bytes() => Ok(()),
        Ok(_) => Err(format!(
            "--results {}: the file exists and is not a page this command generated (its \
             first line is not `{title}`); refusing to overwrite it: name a new file or the \
             page itself",
            path.display()
        )),
    }
}

/// A data file a command writes beside its results page, and how its output from an
/// earlier run is known: the file starts with `starts` and holds `holds`.
#[derive(Clone, Copy, Debug)]
pub struct Sibling {
    /// The file's name, in the page's directory.
    pub name: &'static str,
    /// How the command's output of that name begins (a CSV header, an SVG's size).
    pub starts: &'static str,
    /// A string the command's output of that name holds (a plot's caption).
    pub holds: &'static str,
}

/// The directory a results page at `page` is in (`.` for a bare file name).
pub fn page_dir(page: &std::path::Path) -> &std::path::Path {
    page.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
}

/// Checks, before a run, that each of `siblings` may be written beside the results page
/// at `page`: it is missing, or an earlier output of the same command
/// ([`Sibling::starts`], [`Sibling::holds`]). Any other file of that name is refused, not
/// overwritten, as [`check_results_page`] refuses a page.
pub fn check_results_siblings(page: &std::path::Path, siblings: &[Sibling]) -> Result<(), String> {
    let dir = page_dir(page);
    for s in siblings {
        // The data would be written over the page just written.
        if page.file_name() == Some(std::ffi::OsStr::new(s.name)) {
            return Err(format!(
                "--results {}: the command writes its data under that name beside the \
                 page; name the page otherwise (e.g. a .md file)",
                page.display()
            ));
        }
        let path = dir.join(s.name);
        match std::fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "--results {}: cannot read {} beside it to check that it is a file this \
                     command wrote: {e}",
                    page.display(),
                    path.display()
                ))
            }
            Ok(bytes)
                if bytes.starts_with(s.starts.as_bytes())
                    && contains(&bytes, s.holds.as_bytes()) => {}
            Ok(_) => {
                return Err(format!(
                    "--results {}: the command writes {} beside the page, and that file \
                     exists and is not one this command wrote; refusing to overwrite it: \
                     move it, or name a page in another directory",
                    page.display(),
                    path.display()
                ))
            }
        }
    }
    Ok(())
}

/// Whether `needle` occurs in `bytes`.
fn contains(bytes: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || bytes.windows(needle.len()).any(|w| w == needle)
}

/// The bytes before the first line break (`\n` or `\r\n`).
fn first_line(bytes: &[u8]) -> &[u8] {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Formats nanoseconds as microseconds with three decimals (`2345` → `2.345`).
pub fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000, ns % 1_000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn micros_keeps_nanosecond_digits() {
        assert_eq!(super::micros(2_345), "2.345");
        assert_eq!(super::micros(7), "0.007");
        assert_eq!(super::micros(12_000_001), "12000.001");
    }
}

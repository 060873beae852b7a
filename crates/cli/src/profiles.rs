//! Finding a latency profile: a built-in name (`profiles/*.toml`, compiled in) or a file.

use remora_model::LatencyProfile;
use std::path::Path;

/// The profiles compiled into remora, by name.
pub const BUILTIN: [&str; 3] = ["default", "cx4-100g", "slow-data-path"];

/// A built-in profile by name; the error lists the names that exist.
pub fn builtin(name: &str) -> Result<LatencyProfile, String> {
    LatencyProfile::builtin(name).ok_or_else(|| {
        format!(
            "unknown latency profile {name:?} (built-in: {}; or pass a TOML file)",
            BUILTIN.join(", ")
        )
    })
}

/// A profile loaded from a TOML file; the error names the file.
pub fn from_file(path: &Path) -> Result<LatencyProfile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read latency profile {}: {e}", path.display()))?;
    LatencyProfile::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A built-in profile name, or else a path to a profile file.
pub fn load(spec: &str) -> Result<LatencyProfile, String> {
    if let Some(p) = LatencyProfile::builtin(spec) {
        return Ok(p);
    }
    let path = Path::new(spec);
    // What names a file is read as one, so a mistyped path is told it cannot be read,
    // not that it is no built-in name.
    if path.exists() || spec.contains('/') || spec.ends_with(".toml") {
        return from_file(path);
    }
    builtin(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load_and_unknown_names_list_them() {
        for name in BUILTIN {
            assert_eq!(load(name).unwrap().name, name);
        }
        let e = load("no-such-profile").unwrap_err();
        assert!(
            e.contains("default") && e.contains("cx4-100g") && e.contains("slow-data-path"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_file_is_named_in_the_error() {
        let e = from_file(Path::new("/nonexistent/p.toml")).unwrap_err();
        assert!(e.contains("/nonexistent/p.toml"), "{e}");
    }

    /// `--profile` given a path that does not exist says the file cannot be read, not that
    /// the path is no built-in profile's name.
    #[test]
    fn a_missing_profile_file_is_not_called_an_unknown_name() {
        for spec in ["/nonexistent/p.toml", "my-profile.toml", "profiles/nope"] {
            let e = load(spec).unwrap_err();
            assert!(
                e.starts_with(&format!("cannot read latency profile {spec}: ")),
                "{e}"
            );
        }
    }
}

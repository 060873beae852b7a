//! `remora serve --config-file`: a configuration file the server does not understand in
//! full is refused, before the pool is touched, rather than served with defaults.

mod common;

/// Runs `remora serve` with `file` as its configuration; a server that starts (and would
/// run for ever) is killed after a few seconds and reported as started.
fn serve_with(file: &str) -> (bool, String, std::path::PathBuf, tempfile::TempDir) {
    let dir = common::scratch("config-file");
    let conf = dir.path().join("server.toml");
    std::fs::write(&conf, file).unwrap();
    let pool = dir.path().join("pool.pm");
    let (pool_arg, conf_arg) = (pool.to_str().unwrap(), conf.to_str().unwrap());
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--pool",
        pool_arg,
        "--config-file",
        conf_arg,
    ];
    match common::server_refusal(args) {
        Some((_, err)) => (false, err, pool, dir),
        None => (true, String::new(), pool, dir),
    }
}

#[test]
fn a_misspelt_capabilities_table_is_refused_not_served_with_every_extension() {
    // `capabilities` for `caps`: the server would claim a native RDMA FLUSH the user said
    // the NIC lacks.
    let (started, err, pool, _dir) = serve_with(
        "domain = \"DMP\"\nddio = false\nrqwrb = \"PM\"\ntransport = \"iwarp\"\n\
         [capabilities]\nnative_flush = false\natomic_write = false\nnon_posted_write = false\n",
    );
    assert!(
        !started,
        "the server started with an unknown key in its configuration file"
    );
    assert!(err.contains("capabilities"), "{err}");
    assert!(!pool.exists(), "the pool was created");
}

#[test]
fn an_unknown_key_inside_caps_is_refused() {
    let (started, err, pool, _dir) = serve_with(
        "domain = \"DMP\"\nddio = false\nrqwrb = \"PM\"\ntransport = \"iwarp\"\n\
         [caps]\nnative_flush = false\natomic_write = false\nnon_posted_write = false\n\
         native_flsh = true\n",
    );
    assert!(!started, "the server started with an unknown key in caps");
    assert!(err.contains("native_flsh"), "{err}");
    assert!(!pool.exists(), "the pool was created");
}

#[test]
fn a_complete_configuration_file_is_served() {
    let (started, err, _pool, _dir) = serve_with(
        "domain = \"DMP\"\nddio = false\nrqwrb = \"PM\"\ntransport = \"iwarp\"\n\
         [caps]\nnative_flush = false\natomic_write = false\nnon_posted_write = false\n",
    );
    assert!(started, "{err}");
}

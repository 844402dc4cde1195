//! The core stays pure by construction: `qflow-core` and everything it depends on (its
//! normal dependencies, transitively; dev-dependencies do not ship) pull in no async
//! runtime, no database driver, no network or file-system crate and no id generator.
//! The dependency graph comes from `cargo metadata`, so a new edge anywhere below the
//! core fails here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Crates the core must never reach, with why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("tokio", "async runtime: the core never waits"),
    ("async-std", "async runtime"),
    ("futures", "async machinery belongs to the shell"),
    ("mio", "OS event loop"),
    ("sqlx", "database driver"),
    ("rusqlite", "database driver"),
    ("libsqlite3-sys", "database driver"),
    ("postgres", "database driver"),
    ("tokio-postgres", "database driver"),
    ("socket2", "network sockets"),
    ("hyper", "HTTP"),
    ("reqwest", "HTTP client"),
    ("ureq", "HTTP client"),
    ("axum", "HTTP server"),
    ("rustls", "TLS"),
    ("native-tls", "TLS"),
    ("tempfile", "file system"),
    ("walkdir", "file system"),
    ("notify", "file system"),
    ("memmap2", "file system"),
];

/// Crates no qflow crate below the shell may depend on *directly*. They are allowed
/// further down only because `cel`'s parser (antlr4rust) uses `uuid`, which links
/// `getrandom`; nothing of ours calls them.
const NOT_DIRECTLY: &[(&str, &str)] = &[
    (
        "uuid",
        "ids are the shell's: the core is given its instance id",
    ),
    (
        "getrandom",
        "OS randomness: jitter is a pure function of instance, node and attempt",
    ),
    ("rand", "randomness"),
];

#[test]
fn the_core_depends_on_no_io_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // The graph for this host only: the whole-platform graph would need every other
    // platform's crates downloaded, and this host's is the one that ships here.
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let version = String::from_utf8_lossy(&version.stdout);
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned();
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON");

    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    // id -> ids of its normal (non-dev, non-build) dependencies, as resolved.
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().expect("resolve graph") {
        let id = node["id"].as_str().unwrap();
        let deps = node["deps"].as_array().expect("deps");
        let normal = deps.iter().filter(|d| {
            d["dep_kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
        });
        edges.insert(id, normal.map(|d| d["pkg"].as_str().unwrap()).collect());
    }
    let core = names
        .iter()
        .find(|(_, name)| **name == "qflow-core")
        .map(|(id, _)| *id)
        .expect("qflow-core is in the workspace");

    // Walk the closure, remembering one path to each crate for the message.
    let mut path_to: BTreeMap<&str, Vec<&str>> = BTreeMap::from([(core, vec!["qflow-core"])]);
    let mut todo = vec![core];
    let mut seen = BTreeSet::from([core]);
    while let Some(id) = todo.pop() {
        for &dep in edges.get(id).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(dep) {
                let mut p = path_to[id].clone();
                p.push(names[dep]);
                path_to.insert(dep, p);
                todo.push(dep);
            }
        }
    }
    assert!(seen.len() > 5, "the walk found too little: {seen:?}");
    let found: Vec<String> = seen
        .iter()
        .filter_map(|id| {
            let name = names[id];
            FORBIDDEN
                .iter()
                .find(|(f, _)| *f == name)
                .map(|(_, why)| format!("{name} ({why}) via {}", path_to[id].join(" -> ")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "qflow-core must stay pure, but it depends on:\n{}",
        found.join("\n")
    );
    // Our own crates in the closure (the core and the loader) name none of the
    // not-directly crates as dependencies.
    for (id, deps) in edges.iter().filter(|(id, _)| seen.contains(*id)) {
        if !names[id].starts_with("qflow-") {
            continue;
        }
        for dep in deps {
            if let Some((name, why)) = NOT_DIRECTLY.iter().find(|(f, _)| *f == names[dep]) {
                panic!("{} depends directly on {name} ({why})", names[id]);
            }
        }
    }
    // The shell's crates are reachable from the shell, never from the core.
    for shell in ["qflow-store", "qflow-runtime", "qflow-persistence"] {
        assert!(
            !seen.iter().any(|id| names[id] == shell),
            "qflow-core depends on {shell}"
        );
    }
}

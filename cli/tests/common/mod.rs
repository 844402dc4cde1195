//! What the tests that run `qflow` as a process share: the workspace's path, a server on
//! a free loopback port with its first-contact token (for the tests that drive `qflow
//! serve` with an outside client), and the check that a command closed its SQLite store.
//! Each test crate uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

pub struct Server {
    pub child: Child,
    pub addr: String,
    pub token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A started `qflow serve`: its process, its address, the lines it wrote to stderr up to
/// its banner and the token lines after it, and the channel its further lines arrive on.
pub struct Launched {
    pub child: Child,
    pub addr: String,
    pub lines: mpsc::Receiver<String>,
    pub said: Vec<String>,
}

/// Starts `qflow serve <before_db> --listen 127.0.0.1:0 --db <db> <after_db>` and reads
/// its banner (the address) and the lines that follow it at once (the first-contact
/// token).
pub fn launch(before_db: &[&str], db: &Path, after_db: &[&str]) -> Launched {
    let mut child = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .arg("serve")
        .args(before_db)
        .args(["--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(after_db)
        .env_remove("QFLOW_DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns qflow serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    // A bound on a hang, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no banner from qflow serve; it said: {said:#?}"));
        said.push(line.clone());
        if let Some(rest) = line.strip_prefix("qflow: serving http://") {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    // The token lines follow the banner at once.
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        said.push(line);
    }
    Launched {
        child,
        addr,
        lines,
        said,
    }
}

/// `qflow serve` on a free loopback port and a fresh SQLite file; its first-contact
/// admin token (all scopes, the `worker` scope among them).
pub fn serve(db: &Path) -> Server {
    let Launched {
        child, addr, said, ..
    } = launch(&[], db, &[]);
    let token = said
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("qf_"))
        .unwrap_or_else(|| panic!("no token printed: {said:#?}"))
        .to_owned();
    Server { child, addr, token }
}

/// A command that closed its SQLite store leaves no `-wal` or `-shm` file beside `db`:
/// SQLite folds the WAL into the file on the last close. `after` says which command.
pub fn assert_store_closed(db: &Path, after: &str) {
    for suffix in ["-wal", "-shm"] {
        let mut beside = db.as_os_str().to_owned();
        beside.push(suffix);
        assert!(
            !Path::new(&beside).exists(),
            "{after}: {beside:?} is left beside the store"
        );
    }
}

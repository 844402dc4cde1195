//! Crash recovery (SPEC R1a, R3, C7a): a real child process running instances on a
//! SQLite file is killed with SIGKILL while instances sit in backoff parks; a fresh
//! process on the same file resumes them. Every instance must complete with exactly the
//! scripted attempts — none lost, no attempt committed twice.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_persistence::SqliteStore;
use qflow_store::{InstanceFilter, Store};
use qflow_tests::verdict;

const HOST: &str = env!("CARGO_BIN_EXE_qflow-crash-host");
const INSTANCES: u32 = 120;

fn spawn(db: &str, args: &[&str]) -> Child {
    Command::new(HOST)
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the crash host")
}

/// Reads the child's stdout until `line` appears (or the child ends).
fn wait_for(child: &mut Child, line: &str, limit: Duration) -> bool {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let want = line.to_owned();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if l.starts_with(&want) {
                let _ = tx.send(());
                return;
            }
        }
    });
    rx.recv_timeout(limit).is_ok()
}

fn kill(mut child: Child) {
    child.kill().expect("SIGKILL the host"); // std's kill is SIGKILL on Unix
    child.wait().expect("reap the host");
}

/// Instances of the file that hold a backoff park (`r:` timer row) right now.
async fn parked(db: &str) -> usize {
    let store = SqliteStore::open(db).await.expect("open");
    let all = store
        .instances(&InstanceFilter {
            limit: 10_000,
            ..InstanceFilter::default()
        })
        .await
        .expect("list");
    let mut n = 0;
    for rec in all {
        let timers = store.timers(rec.id).await.expect("timers");
        if timers
            .iter()
            .any(|t| t.name.kind() == qflow_store::TimerKind::Retry)
        {
            n += 1;
        }
    }
    store.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_hosts_resume_every_instance_with_exact_attempts() {
    let dir = std::env::temp_dir().join(format!("qflow-crash-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("crash.sqlite").to_string_lossy().into_owned();

    // First life: start everything, then die shortly after, mid-backoff.
    let mut first = spawn(&db, &["start", &INSTANCES.to_string()]);
    assert!(
        wait_for(&mut first, "started", Duration::from_secs(60)),
        "the host never reported its starts"
    );
    std::thread::sleep(Duration::from_millis(80));
    kill(first);
    assert!(
        parked(&db).await > 0,
        "the first kill should land while instances sit in backoff parks"
    );

    // Several more lives, each killed at a different point of the backoff curve
    // (150 ms, 300 ms, 600 ms parks, plus the 600 ms leases of the dead lives).
    for delay_ms in [120u64, 350, 700, 1_100] {
        let mut life = spawn(&db, &["resume"]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        match life.try_wait().expect("poll the host") {
            Some(_) => break, // finished before it could be killed: nothing left to do
            None => kill(life),
        }
    }

    // Last life runs to the end.
    let began = Instant::now();
    let mut last = spawn(&db, &["resume"]);
    assert!(
        wait_for(&mut last, "done", Duration::from_secs(120)),
        "the final host did not finish"
    );
    last.wait().expect("reap the final host");
    eprintln!("final life finished in {:?}", began.elapsed());

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).await.expect("reopen"));
    let all = store
        .instances(&InstanceFilter {
            limit: 10_000,
            ..InstanceFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(
        all.len() as u32,
        INSTANCES,
        "instances were lost or invented"
    );
    let mut by_fail = [0u32; 4];
    for rec in &all {
        let v = verdict(&*store, rec.id).await.expect("verdict");
        v.assert_as_scripted("flaky");
        by_fail[v.fail as usize] += 1;
        assert!(
            store.timers(rec.id).await.expect("timers").is_empty(),
            "a finished instance left timer rows behind"
        );
    }
    assert_eq!(by_fail, [30, 30, 30, 30]);
    let _ = std::fs::remove_dir_all(&dir);
}

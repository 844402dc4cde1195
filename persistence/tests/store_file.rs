//! Which files the SQLite store opens (issue 8, defect 7): `SqliteStore::inspect` tells a
//! qflow store from an empty or missing file and from anything else, without changing the
//! file, and `SqliteStore::open` refuses anything else instead of adding its tables to it.

use std::path::Path;

use qflow_persistence::{Error, SqliteStore, StoreFile};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{Connection, Executor, SqliteConnection};

/// A SQLite database of another program, in rollback-journal mode so that the file is the
/// whole database.
async fn foreign_database(path: &Path, sql: &str) {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Delete);
    let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
    conn.execute(sql).await.unwrap();
    conn.close().await.unwrap();
}

fn foreign(kind: StoreFile) -> String {
    match kind {
        StoreFile::Foreign(found) => found,
        other => panic!("expected a foreign file, got {other:?}"),
    }
}

#[tokio::test]
async fn inspect_tells_a_store_from_nothing_and_from_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name);

    assert_eq!(
        SqliteStore::inspect(at("missing")).await.unwrap(),
        StoreFile::Missing
    );
    std::fs::write(at("empty"), "").unwrap();
    assert_eq!(
        SqliteStore::inspect(at("empty")).await.unwrap(),
        StoreFile::Empty
    );
    foreign_database(&at("no-tables"), "PRAGMA user_version = 1").await;
    assert_eq!(
        SqliteStore::inspect(at("no-tables")).await.unwrap(),
        StoreFile::Empty
    );

    let store = SqliteStore::open(at("store")).await.unwrap();
    store.close().await;
    assert_eq!(
        SqliteStore::inspect(at("store")).await.unwrap(),
        StoreFile::Qflow
    );
    assert!(SqliteStore::is_qflow_store(at("store")).await.unwrap());

    std::fs::write(at("text"), "hello\n").unwrap();
    assert!(foreign(SqliteStore::inspect(at("text")).await.unwrap())
        .starts_with("not a SQLite database"));
    // A file that starts with the SQLite header but whose header SQLite cannot read.
    let mut damaged = b"SQLite format 3\0".to_vec();
    damaged.extend([0xffu8; 84]);
    std::fs::write(at("damaged"), &damaged).unwrap();
    assert!(foreign(SqliteStore::inspect(at("damaged")).await.unwrap())
        .starts_with("not a SQLite database"));
    std::fs::create_dir(at("dir")).unwrap();
    assert_eq!(
        foreign(SqliteStore::inspect(at("dir")).await.unwrap()),
        "a directory"
    );
    foreign_database(
        &at("crm"),
        "CREATE TABLE b (x); CREATE TABLE a (x); CREATE TABLE c (x); CREATE TABLE d (x); \
         CREATE TABLE e (x); CREATE TABLE f (x); CREATE TABLE g (x)",
    )
    .await;
    assert_eq!(
        foreign(SqliteStore::inspect(at("crm")).await.unwrap()),
        "a SQLite database with tables qflow did not create: a, b, c, d, e and 2 more"
    );
    // Tables named like qflow's are not a store without its migration record.
    foreign_database(
        &at("lookalike"),
        "CREATE TABLE instances (x); CREATE TABLE deployments (x)",
    )
    .await;
    assert!(!SqliteStore::is_qflow_store(at("lookalike")).await.unwrap());
}

#[tokio::test]
async fn open_refuses_another_programs_database_and_leaves_it_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let crm = dir.path().join("crm.sqlite");
    foreign_database(
        &crm,
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); \
         INSERT INTO customers (name) VALUES ('ada')",
    )
    .await;
    let before = std::fs::read(&crm).unwrap();

    let err = SqliteStore::open(&crm).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotAStore { found, .. } if found.ends_with("customers")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("crm.sqlite is not a qflow store"),
        "{err}"
    );
    assert_eq!(std::fs::read(&crm).unwrap(), before, "not a byte changed");

    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hello\n").unwrap();
    assert!(matches!(
        SqliteStore::open(&notes).await.unwrap_err(),
        Error::NotAStore { .. }
    ));
    assert_eq!(std::fs::read(&notes).unwrap(), b"hello\n");
}

#[tokio::test]
async fn a_store_reopens_and_an_empty_file_becomes_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("run.sqlite");
    std::fs::write(&db, "").unwrap();
    let store = SqliteStore::open(&db).await.unwrap();
    store.close().await;
    let store = SqliteStore::open(&db).await.expect("a qflow store reopens");
    store.close().await;
}

/// The child process's half of the next test: opens the store at `QFLOW_TEST_WRITER_DB`,
/// deploys one process named by `QFLOW_TEST_WRITER_PROCESS`, and exits (the last
/// connection of its process closes).
async fn write_as_another_process(db: &str, process: &str) {
    let store = SqliteStore::open(db).await.unwrap();
    let hash = format!("{:0>64}", process.len());
    qflow_store::Store::deploy(
        &store,
        qflow_store::NewDeployment {
            process_id: process,
            content_hash: &hash,
            source: "<definitions/>",
            deployed_at_ms: 1,
            schedules: &[],
        },
    )
    .await
    .unwrap();
    store.close().await;
}

/// Opening (and so inspecting) a second store on a file in a process that already has one
/// open there must not drop the process's locks on the file: another process writing and
/// exiting would take this one for gone, checkpoint and remove the WAL under it, and this
/// process's stores would go on reading a WAL nobody else sees — never seeing that write.
#[tokio::test]
async fn a_second_store_on_one_file_keeps_seeing_what_another_process_writes() {
    if let (Ok(db), Ok(process)) = (
        std::env::var("QFLOW_TEST_WRITER_DB"),
        std::env::var("QFLOW_TEST_WRITER_PROCESS"),
    ) {
        return write_as_another_process(&db, &process).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("qflow.db");
    let first = SqliteStore::open(&db).await.unwrap();
    // A second store in this process (as an application embedding a runtime and an
    // operator API may open), then an inspection of the file.
    let second = SqliteStore::open(&db).await.unwrap();
    assert_eq!(SqliteStore::inspect(&db).await.unwrap(), StoreFile::Qflow);
    for (round, process) in ["written_elsewhere", "and_again"].into_iter().enumerate() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_second_store_on_one_file_keeps_seeing_what_another_process_writes",
                "--quiet",
            ])
            .env("QFLOW_TEST_WRITER_DB", &db)
            .env("QFLOW_TEST_WRITER_PROCESS", process)
            .status()
            .unwrap();
        assert!(status.success(), "the writer process failed");
        for store in [&first, &second] {
            let seen = qflow_store::Store::deployments(store).await.unwrap();
            assert_eq!(seen.len(), round + 1, "round {round}: {seen:?}");
            assert!(seen.iter().any(|d| d.process_id == process));
        }
    }
    // This process's own write after the other's exit reaches the file too: a process
    // opening it afresh sees all three.
    write_as_another_process(db.to_str().unwrap(), "written_here").await;
    second.close().await;
    first.close().await;
    let fresh = SqliteStore::open(&db).await.unwrap();
    assert_eq!(
        qflow_store::Store::deployments(&fresh).await.unwrap().len(),
        3
    );
}

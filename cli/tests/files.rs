//! The files `--db` names (issue 8, defect 7): `qflow run` and the operator commands open,
//! create or (with `--fresh`) delete a file only when it is a qflow store, an empty file or
//! missing; another program's data is refused and left exactly as it was.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn qflow(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("run qflow")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A SQLite database another program owns: one table, one row, rollback journal (so the
/// whole database is the one file, and "unchanged" means "the same bytes").
fn foreign_database(path: &Path) {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    use sqlx::{Connection, Executor};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Delete);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("create the foreign database");
        conn.execute(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); \
             INSERT INTO customers (name) VALUES ('ada')",
        )
        .await
        .expect("write the foreign database");
        conn.close().await.expect("close");
    });
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("the file is still there")
}

#[test]
fn fresh_refuses_to_delete_a_file_that_is_not_a_qflow_store() {
    let dir = scratch();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "my notes\n").unwrap();

    let out = qflow(&["run", "--fresh", "--instances", "1"], &notes);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--fresh refused"), "{err}");
    assert!(err.contains("notes.txt is not a qflow store"), "{err}");
    assert!(err.contains("not a SQLite database"), "{err}");
    assert_eq!(bytes(&notes), b"my notes\n", "the file is untouched");

    let sub = dir.path().join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    let out = qflow(&["run", "--fresh", "--instances", "1"], &sub);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("it is a directory"),
        "{}",
        stderr(&out)
    );
    assert!(sub.is_dir());
}

#[test]
fn run_neither_adds_its_tables_to_another_programs_database_nor_deletes_it() {
    let dir = scratch();
    let db = dir.path().join("crm.sqlite");
    foreign_database(&db);
    let before = bytes(&db);

    for fresh in [false, true] {
        let mut args = vec!["run", "--instances", "1"];
        if fresh {
            args.push("--fresh");
        }
        let out = qflow(&args, &db);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "fresh={fresh}: {err}");
        assert!(
            err.contains("crm.sqlite is not a qflow store: it is a SQLite database with tables qflow did not create: customers"),
            "fresh={fresh}: {err}"
        );
        assert_eq!(
            bytes(&db),
            before,
            "fresh={fresh}: the database is unchanged"
        );
        assert!(!dir.path().join("crm.sqlite-wal").exists());
    }
}

#[test]
fn operator_commands_refuse_anything_but_a_qflow_store() {
    let dir = scratch();
    let crm = dir.path().join("crm.sqlite");
    foreign_database(&crm);
    let before = bytes(&crm);
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "my notes\n").unwrap();
    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, "").unwrap();
    let missing = dir.path().join("missing.sqlite");

    let cases: [(&PathBuf, &str); 4] = [
        (
            &crm,
            "crm.sqlite is not a qflow store: it is a SQLite database with tables",
        ),
        (
            &notes,
            "notes.txt is not a qflow store: it is not a SQLite database",
        ),
        (&empty, "no qflow store at"),
        (&missing, "no qflow store at"),
    ];
    for (db, want) in cases {
        for command in [&["instances", "list"][..], &["deployments"][..]] {
            let out = qflow(command, db);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{command:?} {db:?}: {err}");
            assert!(
                err.contains(want),
                "{command:?} {db:?}: missing `{want}` in {err}"
            );
        }
    }
    assert_eq!(bytes(&crm), before);
    assert_eq!(bytes(&notes), b"my notes\n");
    assert_eq!(
        bytes(&empty),
        b"",
        "an operator command never creates a store"
    );
    assert!(!missing.exists());
}

#[test]
fn an_empty_file_becomes_a_store_and_fresh_starts_a_store_over() {
    let dir = scratch();
    let db = dir.path().join("run.sqlite");
    std::fs::write(&db, "").unwrap();
    let count = |db: &Path| -> usize {
        let out = qflow(&["instances", "list", "--format", "json"], db);
        assert!(out.status.success(), "{}", stderr(&out));
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        rows.as_array().expect("a list").len()
    };

    let out = qflow(&["run", "--instances", "3"], &db);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = qflow(&["run", "--instances", "2"], &db);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(count(&db), 5, "a second run adds to the store");

    let out = qflow(&["run", "--fresh", "--instances", "2"], &db);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(count(&db), 2, "--fresh deleted the qflow store first");
}

//! Every outside corpus model the loader accepts is one this engine can run: `qflow check`
//! saying "loads" must not be followed by a deployment refused for an element the core
//! cannot execute (`qflow_core::unsupported_elements`). Until 2026-12-06 three corpus files
//! (`miwg/C.9.1`, `miwg/C.9.2`, `bpmn-engine/messaging`) loaded and could not be deployed.

#[path = "../../loader/tests/support/corpus.rs"]
mod corpus;

#[test]
fn every_corpus_model_that_loads_deploys() {
    let Some(dir) = corpus::corpus_dir() else {
        return;
    };
    let mut loaded = 0;
    let mut undeployable = Vec::new();
    for path in corpus::bpmn_files(&dir) {
        let xml = std::fs::read_to_string(&path).expect("corpus file is readable");
        let Ok(l) = qflow_loader::load_str(&xml) else {
            continue;
        };
        for def in &l.definitions {
            loaded += 1;
            for (node, what) in qflow_core::unsupported_elements(def) {
                undeployable.push(format!("{}: `{node}` ({what})", path.display()));
            }
        }
    }
    assert!(loaded > 0, "no corpus model loaded");
    assert!(
        undeployable.is_empty(),
        "models that load but cannot be deployed:\n{}",
        undeployable.join("\n")
    );
}

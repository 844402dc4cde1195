//! Inputs shared by the loader benchmarks: the outside corpus and a generated model.
//! Benchmarks only read these; nothing here measures anything.

use std::path::Path;

/// Every `.bpmn` file under `../shared/corpus`, sorted by path; empty when absent.
pub fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    let mut pending = vec![dir];
    let mut files = Vec::new();
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "bpmn") {
                files.push(path);
            }
        }
    }
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// A long linear process: start, `tasks` registered tasks each with a retry policy, a
/// timeout and an output mapping, an exclusive gateway with a condition every 10 tasks,
/// then an end event.
pub fn synthetic(tasks: usize) -> Vec<u8> {
    let mut xml = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="bench">
  <process id="linear" isExecutable="true">
    <startEvent id="start"/>
"#,
    );
    let mut previous = "start".to_string();
    for i in 0..tasks {
        let id = format!("task_{i}");
        xml.push_str(&format!(
            r#"    <sequenceFlow id="to_{id}" sourceRef="{previous}" targetRef="{id}"/>
    <serviceTask id="{id}" name="Task number {i}" q:task="work_{i}">
      <extensionElements>
        <q:retry maxAttempts="5" initialInterval="PT1S" backoffMultiplier="2" maxInterval="PT1M" nonRetryableCodes="HANDLER_PANICKED"/>
        <q:timeout duration="PT30S"/>
      </extensionElements>
    </serviceTask>
"#
        ));
        previous = id;
        if i % 10 == 9 {
            let gw = format!("gw_{i}");
            xml.push_str(&format!(
                r#"    <sequenceFlow id="to_{gw}" sourceRef="{previous}" targetRef="{gw}"/>
    <exclusiveGateway id="{gw}" default="{gw}_default"/>
    <sequenceFlow id="{gw}_cond" sourceRef="{gw}" targetRef="{gw}_join">
      <conditionExpression>amount &gt; {i} &amp;&amp; status == "open"</conditionExpression>
    </sequenceFlow>
    <sequenceFlow id="{gw}_default" sourceRef="{gw}" targetRef="{gw}_join"/>
    <exclusiveGateway id="{gw}_join"/>
"#
            ));
            previous = format!("{gw}_join");
        }
    }
    xml.push_str(&format!(
        r#"    <sequenceFlow id="to_end" sourceRef="{previous}" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>
"#
    ));
    xml.into_bytes()
}

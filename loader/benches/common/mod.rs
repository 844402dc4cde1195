//! Inputs shared by the loader benchmarks: the outside corpus and a generated model.
//! Benchmarks only read these; nothing here measures anything.

#[path = "../../tests/support/corpus.rs"]
mod corpus_files;

/// Every `.bpmn` file under `../shared/corpus`, sorted by path; empty when absent.
pub fn corpus() -> Vec<Vec<u8>> {
    let files = corpus_files::corpus_dir()
        .map(|dir| corpus_files::bpmn_files(&dir))
        .unwrap_or_default();
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

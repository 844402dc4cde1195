//! Vendor mappings at run time (L8): `zeebe:ioMapping` and `camunda:inputOutput` keep
//! their vendor's semantics — input mappings are locals the task sees over the instance
//! variables and that never reach them; Zeebe output mappings replace the merge of the
//! completion variables, Camunda's come after it. Every case goes through `run_scenario`.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::sim::Trace;
use qflow_core::Effect;
use serde_json::{json, Value};

const ZEEBE: &str = r#"xmlns:zeebe="http://camunda.org/schema/zeebe/1.0""#;
const CAMUNDA: &str = r#"xmlns:camunda="http://camunda.org/schema/1.0/bpmn""#;

/// start → a registered task `t` with `ext` in its extension elements → end.
fn around_task(ns: &str, ext: &str) -> qflow_loader::model::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
      <serviceTask id="t" q:task="t" {ns}><extensionElements>{ext}</extensionElements></serviceTask>
      <sequenceFlow id="f1" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#
    ))
}

/// What the handler of `t` was given.
fn handler_inputs(trace: &Trace) -> Value {
    let inputs = effects(trace)
        .into_iter()
        .find_map(|(_, e)| match e {
            Effect::RunTask { inputs, .. } => Some(inputs),
            _ => None,
        })
        .expect("the task ran");
    serde_json::to_value(inputs).unwrap()
}

fn final_vars(trace: &Trace) -> Value {
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    serde_json::to_value(last(trace).variables()).unwrap()
}

#[test]
fn zeebe_inputs_are_locals_and_outputs_replace_the_merge() {
    let def = around_task(
        ZEEBE,
        r#"<zeebe:ioMapping>
             <zeebe:input source="=order.total" target="amount"/>
             <zeebe:input source="Peter" target="sender"/>
             <zeebe:output source="=status" target="paymentStatus"/>
             <zeebe:output source="=status = &quot;ok&quot; and amount = 12" target="checked"/>
           </zeebe:ioMapping>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"total": 12}, "sender": "Ann"},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"status": "ok", "noise": 1}}]}}"#,
    );
    // The job sees every variable with the locals over them.
    assert_eq!(
        handler_inputs(&trace),
        json!({"order": {"total": 12}, "sender": "Peter", "amount": 12})
    );
    // Only the outputs reach the instance: neither the completion variables nor the
    // locals; an output sees the result and the locals.
    assert_eq!(
        final_vars(&trace),
        json!({"order": {"total": 12}, "sender": "Ann", "paymentStatus": "ok", "checked": true})
    );
}

#[test]
fn zeebe_without_outputs_merges_the_result_except_the_locals() {
    let def = around_task(
        ZEEBE,
        r#"<zeebe:ioMapping><zeebe:input source="=1" target="tmp"/></zeebe:ioMapping>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"tmp": 0},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"tmp": 5, "done": true}}]}}"#,
    );
    assert_eq!(handler_inputs(&trace), json!({"tmp": 1}));
    assert_eq!(final_vars(&trace), json!({"tmp": 0, "done": true}));
}

#[test]
fn camunda_inputs_see_the_instance_and_outputs_follow_the_merge() {
    let def = around_task(
        CAMUNDA,
        r#"<camunda:inputOutput>
             <camunda:inputParameter name="x">${a}</camunda:inputParameter>
             <camunda:inputParameter name="y">${x}</camunda:inputParameter>
             <camunda:inputParameter name="label">  constant  </camunda:inputParameter>
             <camunda:inputParameter name="gone"/>
             <camunda:outputParameter name="out">${result_value}</camunda:outputParameter>
             <camunda:outputParameter name="again">${out}</camunda:outputParameter>
             <camunda:outputParameter name="seen">${x}</camunda:outputParameter>
           </camunda:inputOutput>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"a": 1, "x": "outer"},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"result_value": 7, "x": 99}}]}}"#,
    );
    // Camunda evaluates each input over the instance variables: `y` reads the instance's
    // `x`, not the input before it.
    assert_eq!(
        handler_inputs(&trace),
        json!({"a": 1, "x": 1, "y": "outer", "label": "constant", "gone": null})
    );
    // The completion variables are merged, but `x` sets the local of that name and
    // stays local; the outputs see the merge, each other, and the locals over the
    // instance.
    assert_eq!(
        final_vars(&trace),
        json!({"a": 1, "x": "outer", "result_value": 7, "out": 7, "again": 7, "seen": 99})
    );
}

#[test]
fn a_zeebe_start_output_and_a_sum_loop_as_the_corpus_model_does() {
    let def = model(&format!(
        r#"<startEvent id="s" {ZEEBE}><extensionElements><zeebe:ioMapping><zeebe:output source="= 0" target="loopAmount"/></zeebe:ioMapping></extensionElements></startEvent>
      <sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
      <serviceTask id="t" q:task="t" {ZEEBE}><extensionElements><zeebe:ioMapping><zeebe:output source="= loopAmount + 1" target="loopAmount"/></zeebe:ioMapping></extensionElements></serviceTask>
      <sequenceFlow id="f1" sourceRef="t" targetRef="gw"/>
      <exclusiveGateway id="gw" default="again"/>
      <sequenceFlow id="done" sourceRef="gw" targetRef="e"><conditionExpression>loopAmount == 3</conditionExpression></sequenceFlow>
      <sequenceFlow id="again" sourceRef="gw" targetRef="t"/>
      <endEvent id="e"/>"#
    ));
    let trace = run_scenario(&def, r#"{"tasks": {"t": [{"outcome": "ok"}]}}"#);
    assert_eq!(final_vars(&trace), json!({"loopAmount": 3}));
    assert_eq!(handler_inputs(&trace), json!({"loopAmount": 0}));
    // A completion variable of the same name is local to the task and covers the
    // instance's in the output's scope, as in Zeebe: 100 + 1, which never equals 3.
    let shadowed = run_scenario(
        &def,
        r#"{"tasks": {"t": [{"outcome": "ok", "outputs": {"loopAmount": 100}}]}, "max_steps": 5}"#,
    );
    assert_eq!(last(&shadowed).variables()["loopAmount"], json!(101));
}

#[test]
fn event_mappings_write_as_the_token_passes_and_their_locals_do_not_leak() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="th"/>
      <intermediateThrowEvent id="th" {CAMUNDA}><extensionElements><camunda:inputOutput>
        <camunda:inputParameter name="local">${{n}}</camunda:inputParameter>
        <camunda:outputParameter name="copied">${{local}}</camunda:outputParameter>
      </camunda:inputOutput></extensionElements></intermediateThrowEvent>
      <sequenceFlow id="f1" sourceRef="th" targetRef="e"/>
      <endEvent id="e" {ZEEBE}><extensionElements><zeebe:ioMapping><zeebe:output source="=copied = n" target="same"/></zeebe:ioMapping></extensionElements></endEvent>"#
    ));
    let trace = run_scenario(&def, r#"{"variables": {"n": 4}}"#);
    assert_eq!(
        final_vars(&trace),
        json!({"n": 4, "copied": 4, "same": true})
    );
}

#[test]
fn a_user_task_offers_the_variables_with_its_locals_over_them() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="u"/>
      <userTask id="u" {CAMUNDA}><extensionElements><camunda:inputOutput>
        <camunda:inputParameter name="shown">${{n}}</camunda:inputParameter>
      </camunda:inputOutput></extensionElements></userTask>
      <sequenceFlow id="f1" sourceRef="u" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(&def, r#"{"variables": {"n": 4}}"#);
    let snap = last(&trace);
    let offered = qflow_core::user_task_inputs(&def, &snap, "u").unwrap();
    assert_eq!(
        serde_json::to_value(offered).unwrap(),
        json!({"n": 4, "shown": 4})
    );
    assert_eq!(
        serde_json::to_value(snap.variables()).unwrap(),
        json!({"n": 4})
    );
}

#[test]
fn a_failing_vendor_mapping_fails_the_instance_at_the_node() {
    let def = around_task(
        ZEEBE,
        r#"<zeebe:ioMapping><zeebe:output source="=total + 1" target="total"/></zeebe:ioMapping>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"total": 1.5}, "tasks": {"t": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("EXPRESSION_FAILED")
    );
    assert_eq!(trace.summary.failure_node.as_deref(), Some("t"));
}

#[test]
fn a_zeebe_job_worker_fetches_the_variables_with_the_locals_and_completes_through_the_outputs() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
      <serviceTask id="t" {ZEEBE}><extensionElements><zeebe:taskDefinition type="ship"/><zeebe:ioMapping>
        <zeebe:input source="=order.id" target="orderId"/>
        <zeebe:output source="=trackingNo" target="tracking"/>
      </zeebe:ioMapping></extensionElements></serviceTask>
      <sequenceFlow id="f1" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#
    ));
    let waiting = run_scenario(&def, r#"{"variables": {"order": {"id": "o-1"}}}"#);
    let fetched = qflow_core::pull_inputs(&def, &last(&waiting), "t").unwrap();
    assert_eq!(
        serde_json::to_value(fetched).unwrap(),
        json!({"order": {"id": "o-1"}, "orderId": "o-1"})
    );
    let done = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "o-1"}},
            "events": [
              {"event": "pull", "at_ms": 10, "input": {"type": "pull_locked", "node": "t", "attempt": 1, "worker": "w", "lock_ms": 30000}},
              {"event": "pull", "at_ms": 20, "input": {"type": "pull_completed", "node": "t", "attempt": 1, "worker": "w",
                                                      "variables": {"trackingNo": "T-9", "carrier": "dhl"}}}
            ]}"#,
    );
    assert_eq!(
        final_vars(&done),
        json!({"order": {"id": "o-1"}, "tracking": "T-9"})
    );
}

/// A Zeebe output with a nested target (`order.total`) creates or updates that property
/// and keeps the variable's other properties, at every level; an object missing on the
/// way is created, a value on the way that is not an object is replaced by one (Zeebe's
/// output mappings, the same in every version).
#[test]
fn a_zeebe_output_with_a_nested_target_updates_that_property_only() {
    let def = around_task(
        ZEEBE,
        r#"<zeebe:ioMapping>
             <zeebe:output source="=total" target="order.total"/>
             <zeebe:output source="=status" target="order.payment.status"/>
             <zeebe:output source="=total" target="receipt.amount"/>
             <zeebe:output source="paid" target="flag.value"/>
           </zeebe:ioMapping>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": 7, "total": 1, "payment": {"card": "x"}}, "flag": 3},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"total": 12, "status": "ok"}}]}}"#,
    );
    assert_eq!(
        final_vars(&trace),
        json!({
            "order": {"id": 7, "total": 12, "payment": {"card": "x", "status": "ok"}},
            "receipt": {"amount": 12},
            "flag": {"value": "paid"}
        })
    );
}

/// Zeebe inputs with nested targets build a local object from their siblings; the local
/// never reaches the instance. Where a variable of the root's name is visible outside,
/// Zeebe versions differ on what the local starts from, so the instance fails there with
/// `EXPRESSION_FAILED` instead of picking one.
#[test]
fn zeebe_nested_input_targets_build_a_local_object_and_refuse_a_shadowed_root() {
    let def = around_task(
        ZEEBE,
        r#"<zeebe:ioMapping>
             <zeebe:input source="=sender.mail" target="from.email"/>
             <zeebe:input source="Shop" target="from.name"/>
           </zeebe:ioMapping>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"sender": {"mail": "a@b.c"}},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"sent": true}}]}}"#,
    );
    assert_eq!(
        handler_inputs(&trace),
        json!({"sender": {"mail": "a@b.c"}, "from": {"email": "a@b.c", "name": "Shop"}})
    );
    // Without outputs the completion variables merge, but the local `from` ends with the
    // task.
    assert_eq!(
        final_vars(&trace),
        json!({"sender": {"mail": "a@b.c"}, "sent": true})
    );

    let shadowed = run_scenario(
        &def,
        r#"{"variables": {"sender": {"mail": "a@b.c"}, "from": {"phone": "1"}},
            "tasks": {"t": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(shadowed.summary.status, "failed", "{:?}", shadowed.summary);
    let failure = last(&shadowed).failure().expect("failed");
    assert_eq!(failure.code, "EXPRESSION_FAILED");
    assert_eq!(failure.node.as_deref(), Some("t"));
    let message = effects(&shadowed)
        .into_iter()
        .find_map(|(_, e)| match e {
            Effect::OpenIncident { message, .. } => Some(message),
            _ => None,
        })
        .expect("an incident");
    assert!(message.contains("Zeebe versions differ"), "{message}");
}

/// Camunda 7's composite JUEL text (`Order ${id} shipped`): the literal parts as written
/// and each `${…}` part's value as JUEL coerces it to a String — a string itself, an
/// integer its digits, a boolean `true`/`false`, null the empty string. A double (Java
/// writes `12.0`, `1.0E21`) fails the instance rather than give other text.
#[test]
fn camunda_composite_text_is_a_string_with_each_part_coerced_as_juel_does() {
    let def = around_task(
        CAMUNDA,
        r#"<camunda:inputOutput>
             <camunda:inputParameter name="subject">Order ${order.id} for ${name}: ${n} items, paid ${paid}${note}.</camunda:inputParameter>
           </camunda:inputOutput>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A-7"}, "name": "Ann", "n": 3, "paid": true, "note": null},
            "tasks": {"t": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(
        handler_inputs(&trace)["subject"],
        json!("Order A-7 for Ann: 3 items, paid true.")
    );
    let doubled = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A-7"}, "name": "Ann", "n": 3.5, "paid": true, "note": null},
            "tasks": {"t": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(doubled.summary.status, "failed");
    assert_eq!(
        doubled.summary.failure_code.as_deref(),
        Some("EXPRESSION_FAILED")
    );
}

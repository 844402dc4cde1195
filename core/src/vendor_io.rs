//! Vendor mappings at run time (L8): `zeebe:ioMapping` and `camunda:inputOutput` with
//! their vendor's semantics ([`MappingStyle`]), beside the `q:` mappings `flow` applies
//! itself. Pure functions of the mappings and the variables handed in.
//!
//! An input mapping makes a *local* variable of the task: the task (its handler, worker,
//! task-list entry or request body) is given the instance variables with the locals over
//! them, and the output mappings see the locals — but the locals never reach the
//! instance variables. qflow keeps no local scope of a task in the snapshot (a
//! sub-process's locals it keeps, `locals`): the task's locals are
//! evaluated again from the instance variables whenever they are needed (when the task is
//! offered, run or re-adopted, and when it completes), so they are the vendor's as long as
//! the variables their sources read do not change while the task waits
//! (`docs/bpmn-coverage.md`, "Vendor mappings").

use qflow_loader::model::{Mapping, MappingStyle, Variables};
use serde_json::Value as Json;

/// The locals `inputs` make over `vars`: Zeebe evaluates each input over the variables
/// and the inputs before it; Camunda 7 each over the variables alone. (The loader refuses
/// a Zeebe mapping that reads an earlier one's target, so for Zeebe the order never
/// shows: its versions differ on it.)
///
/// A Zeebe input with a nested target (`from.email`) builds the local `from` as an object
/// with that property, and its siblings (`from.name`) add theirs. That is every Zeebe
/// version's meaning while no variable `from` is visible outside the element; when one
/// is, versions differ on whether the local starts from its value or from nothing
/// (camunda/camunda#56735), so the mapping fails (`EXPRESSION_FAILED` where the caller
/// evaluates it) rather than pick one.
pub(crate) fn locals(
    style: MappingStyle,
    inputs: &[Mapping],
    vars: &Variables,
) -> Result<Variables, String> {
    let mut locals = Variables::new();
    if inputs.is_empty() {
        return Ok(locals);
    }
    let mut scope = match style {
        MappingStyle::Zeebe => Some(vars.clone()),
        _ => None,
    };
    for m in inputs {
        let v = m
            .source
            .eval(scope.as_ref().unwrap_or(vars))
            .map_err(|e| format!("input mapping `{}`: {e}", m.target))?;
        let one = match m.target.split_once('.') {
            None => Variables::from([(m.target.clone(), v)]),
            Some((root, _)) => {
                if !locals.contains_key(root) && vars.contains_key(root) {
                    return Err(format!(
                        "input mapping `{}`: `{root}` is also a variable the element sees, and \
                         Zeebe versions differ on whether the local `{root}` starts from its \
                         value or from nothing; map the whole object (`{root}`) instead",
                        m.target
                    ));
                }
                let start = locals
                    .get(root)
                    .cloned()
                    .unwrap_or_else(|| Json::Object(Default::default()));
                let mut one = Variables::from([(root.to_owned(), start)]);
                put_path(&mut one, &m.target, v);
                one
            }
        };
        crate::limits::check_variables(&one)
            .map_err(|why| format!("input mapping `{}`: {why}", m.target))?;
        if let Some(scope) = scope.as_mut() {
            scope.extend(one.clone());
        }
        locals.extend(one);
    }
    Ok(locals)
}

/// What the task is given: the instance variables with its locals over them.
pub(crate) fn visible(
    style: MappingStyle,
    inputs: &[Mapping],
    vars: &Variables,
) -> Result<Variables, String> {
    let locals = locals(style, inputs, vars)?;
    let mut all = vars.clone();
    all.extend(locals);
    Ok(all)
}

/// What a task's end (`result`: its completion variables; `None` for an event a token
/// passes through) writes, by the vendor's rules, evaluated over `vars` (what the
/// element sees: the instance variables, with the locals of the sub-process instances
/// around it over them). Returns the writes, whole top-level variables, for the caller
/// to set where Zeebe's propagation puts each (`locals::Run::write_vars`):
///
/// - Zeebe, with outputs: the result is local (over the input locals); each output, in
///   order, is evaluated over the variables, the locals, the result and the outputs
///   before it; only the outputs are written. Without outputs: the result is merged,
///   except the names of locals (those set the local, which ends with the task).
/// - Camunda 7: the result is merged, except the names of locals, which set the local;
///   then each output, in order, is evaluated over the variables (as the outputs before
///   it left them) with the locals over them, and written.
pub(crate) fn complete(
    style: MappingStyle,
    inputs: &[Mapping],
    outputs: &[Mapping],
    vars: &Variables,
    result: Option<Variables>,
) -> Result<Variables, String> {
    let mut locals = locals(style, inputs, vars)?;
    let mut writes = Variables::new();
    // A completion variable named like a local sets the local (it ends with the task);
    // every other one is merged into the instance.
    let merge = |writes: &mut Variables, locals: &mut Variables, result: Variables| {
        for (k, v) in result {
            match locals.get_mut(&k) {
                Some(local) => *local = v,
                None => {
                    writes.insert(k, v);
                }
            }
        }
    };
    if style == MappingStyle::Zeebe {
        if outputs.is_empty() {
            if let Some(result) = result {
                merge(&mut writes, &mut locals, result);
            }
            return Ok(writes);
        }
        let mut scope = vars.clone();
        scope.extend(locals.clone());
        scope.extend(result.unwrap_or_default());
        // Evaluated in order over the scope, then written in order: a nested target
        // (`order.total`) updates that property of the variable and keeps the rest.
        let mut written: Vec<(&str, Json)> = Vec::with_capacity(outputs.len());
        for m in outputs {
            let v = output_value(m, &scope)?;
            put_path(&mut scope, &m.target, v.clone());
            written.push((&m.target, v));
        }
        for (target, v) in written {
            // A nested target updates the variable as the element sees it.
            let root = target.split('.').next().unwrap_or(target);
            if !writes.contains_key(root) {
                if let Some(old) = vars.get(root) {
                    writes.insert(root.to_owned(), old.clone());
                }
            }
            put_path(&mut writes, target, v);
        }
        if outputs.iter().any(|m| m.target.contains('.')) {
            crate::limits::check_variables(&writes)
                .map_err(|why| format!("output mappings: {why}"))?;
        }
        return Ok(writes);
    }
    if let Some(result) = result {
        merge(&mut writes, &mut locals, result);
    }
    let mut scope = vars.clone();
    scope.extend(writes.clone());
    scope.extend(locals.clone());
    for m in outputs {
        let one = output(m, &scope)?;
        // A local of the same name keeps covering the instance variable in the scope.
        if !locals.contains_key(&m.target) {
            scope.extend(one.clone());
        }
        writes.extend(one);
    }
    Ok(writes)
}

fn output(m: &Mapping, scope: &Variables) -> Result<Variables, String> {
    let v = output_value(m, scope)?;
    Ok(Variables::from([(m.target.clone(), v)]))
}

/// An output mapping's value over `scope`, within the bounds of a variable.
fn output_value(m: &Mapping, scope: &Variables) -> Result<Json, String> {
    let v = m
        .source
        .eval(scope)
        .map_err(|e| format!("output mapping `{}`: {e}", m.target))?;
    let one = Variables::from([(m.target.clone(), v)]);
    crate::limits::check_variables(&one)
        .map_err(|why| format!("output mapping `{}`: {why}", m.target))?;
    Ok(one.into_iter().next().map(|(_, v)| v).unwrap_or(Json::Null))
}

/// Writes `v` at `target` in `vars`: a plain name sets the variable; a path
/// (`order.total`, from a Zeebe output) sets that property, creating the objects on the
/// way and keeping their other properties — a value on the way that is not an object is
/// replaced by one, as Zeebe does.
fn put_path(vars: &mut Variables, target: &str, v: Json) {
    let mut segments = target.split('.');
    let root = segments.next().unwrap_or(target);
    let rest: Vec<&str> = segments.collect();
    let Some((last, inner)) = rest.split_last() else {
        vars.insert(root.to_owned(), v);
        return;
    };
    let mut slot = vars
        .entry(root.to_owned())
        .or_insert_with(|| Json::Object(Default::default()));
    for key in inner {
        if !slot.is_object() {
            *slot = Json::Object(Default::default());
        }
        slot = slot
            .as_object_mut()
            .expect("made an object above")
            .entry((*key).to_owned())
            .or_insert_with(|| Json::Object(Default::default()));
    }
    if !slot.is_object() {
        *slot = Json::Object(Default::default());
    }
    slot.as_object_mut()
        .expect("made an object above")
        .insert((*last).to_owned(), v);
}

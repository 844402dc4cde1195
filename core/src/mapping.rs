//! A task's input mappings at run time: what a task is given, by its handler call,
//! channel request, pull fetch or task-list entry alike. Pure functions of the task and
//! the variables handed in.

use qflow_loader::model::{MappingStyle, Task, Variables};

/// A task's inputs: its input mappings evaluated over `vars`, or every instance variable
/// when it has none; with vendor mappings, every instance variable with the task's locals
/// over them. Shared by the first emission, re-adoption, pull fetches and the task list,
/// so all see the same.
pub(crate) fn task_inputs(task: &Task, vars: &Variables) -> Result<Variables, String> {
    if task.mapping_style != MappingStyle::Q {
        // A vendor's inputs are locals over the variables, not a replacement of them.
        return crate::vendor_io::visible(task.mapping_style, &task.inputs, vars);
    }
    if task.inputs.is_empty() {
        return Ok(vars.clone());
    }
    task.inputs
        .iter()
        .map(|m| {
            let v = m.source.eval(vars).map_err(|e| e.to_string())?;
            Ok((m.target.clone(), v))
        })
        .collect()
}

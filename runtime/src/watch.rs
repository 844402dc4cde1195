//! Respond-and-continue (R6): a caller that starts an instance may wait until a token
//! stands at a task marked `q:respond="true"`, or the instance ends, and is answered with
//! the variables so far. The instance does not wait for the caller: it goes on exactly as
//! it would have (its next attempts, backoff parks and leases are the same durable timer
//! rows as ever), so an answered, timed-out or vanished caller changes nothing about it.
//!
//! The lane checks the watchers of an instance after each of its steps commits; the check
//! costs one atomic load while nobody watches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use qflow_core::{Snapshot, Status, Variables};
use qflow_loader::model::{Definition, NodeKind};
use qflow_store::InstanceId;
use tokio::sync::oneshot;

/// Where a watched instance stood when its caller was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub status: Status,
    /// The `q:respond` task a token stood at (when the instance had not ended).
    pub responded_at: Option<String>,
    pub variables: Variables,
    /// The fence of the commit that answered.
    pub fence: u64,
}

/// A caller's wait on one instance.
pub struct Watch {
    pub(crate) rx: oneshot::Receiver<Observed>,
}

impl Watch {
    /// The answer, or `None` when the runtime stopped first.
    pub async fn answered(self) -> Option<Observed> {
        self.rx.await.ok()
    }
}

#[derive(Default)]
pub(crate) struct Watchers {
    count: AtomicUsize,
    by_instance: Mutex<HashMap<InstanceId, Vec<oneshot::Sender<Observed>>>>,
}

impl Watchers {
    pub(crate) fn watch(&self, instance: InstanceId) -> Watch {
        let (tx, rx) = oneshot::channel();
        let mut map = self.by_instance.lock().expect("watchers lock");
        map.entry(instance).or_default().push(tx);
        self.count.fetch_add(1, Ordering::SeqCst);
        Watch { rx }
    }

    /// Drops the watchers of an instance whose start was refused: it will never step.
    pub(crate) fn forget(&self, instance: InstanceId) {
        let mut map = self.by_instance.lock().expect("watchers lock");
        if let Some(waiting) = map.remove(&instance) {
            self.count.fetch_sub(waiting.len(), Ordering::SeqCst);
        }
    }

    /// After a committed step of `instance`: answers its watchers if the instance ended
    /// or a token stands at a `q:respond` task. Watchers whose caller gave up are dropped.
    pub(crate) fn stepped(
        &self,
        instance: InstanceId,
        def: &Definition,
        snap: &Snapshot,
        fence: u64,
    ) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut map = self.by_instance.lock().expect("watchers lock");
        let Some(waiting) = map.get_mut(&instance) else {
            return;
        };
        let before = waiting.len();
        waiting.retain(|tx| !tx.is_closed());
        let mut gone = before - waiting.len();
        let status = snap.status();
        let responded_at = if status.is_terminal() {
            None
        } else {
            match respond_point(def, snap) {
                Some(node) => Some(node),
                None => {
                    if waiting.is_empty() {
                        map.remove(&instance);
                    }
                    self.count.fetch_sub(gone, Ordering::SeqCst);
                    return;
                }
            }
        };
        let observed = Observed {
            status,
            responded_at,
            variables: snap.variables().clone(),
            fence,
        };
        for tx in map.remove(&instance).unwrap_or_default() {
            gone += 1;
            let _ = tx.send(observed.clone());
        }
        self.count.fetch_sub(gone, Ordering::SeqCst);
    }
}

/// The first token (in frontier order) standing at a task marked `q:respond`.
fn respond_point(def: &Definition, snap: &Snapshot) -> Option<String> {
    snap.tokens().iter().find_map(|t| {
        let idx = def.process.find(t)?;
        match &def.process.node(idx).kind {
            NodeKind::Task(task) if task.respond => Some(t.clone()),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_start_leaves_no_watcher_behind() {
        let w = Watchers::default();
        let id = InstanceId::from_u128(7);
        let _a = w.watch(id);
        let _b = w.watch(id);
        assert_eq!(w.count.load(Ordering::SeqCst), 2);
        w.forget(id);
        assert_eq!(w.count.load(Ordering::SeqCst), 0);
        assert!(w.by_instance.lock().unwrap().is_empty());
    }
}

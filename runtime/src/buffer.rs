//! The message buffer (issue 28, `docs/messages.md` "Time to live"): a message published
//! with a time to live is kept in the store until it expires, and reaches every wait
//! that opens for its name and correlation key meanwhile — the oldest buffered message
//! first, and each BPMN process at most once across its versions, as Zeebe correlates
//! buffered messages.
//!
//! "At most once per process" is the store's to keep: the step that delivers a buffered
//! message commits with [`qflow_store::Commit::message_take`], which records the
//! instance's process as a taker in the step's own transaction and refuses the commit
//! when that process took the message before. So whoever offers a message — the
//! publication, a wait that opened, the sweep below, another replica — may offer it
//! again without harm: a second delivery to the same process writes nothing.
//!
//! A buffered message is offered:
//!
//! 1. when it is published, to the waits open at that moment (the publication's caller
//!    does this, through [`Runtime::offer_buffered`] or [`offer`]);
//! 2. when a wait for its name and key opens: every commit that opens a message wait —
//!    a lane's round, a step taken outside the lanes — hands `(name, key)` to this
//!    module's task, which looks the buffer up after the commit and offers what it finds
//!    (the read comes after the commit, so a publication racing the wait's opening is
//!    seen by one of the two, whichever commits last);
//! 3. by the sweep, every [`SWEEP_MS`] of the runtime's clock and once at start: every
//!    live message is offered to the waits open for it. This is what delivers a message
//!    whose wait opened in a process that died before its lookup, or in another replica's
//!    steps, or whose offer was cut short by an error. The sweep also deletes expired
//!    messages.
//!
//! Message start events do not take buffered messages: a publication that nothing waits
//! for starts instances at once, as one without a time to live does, and later
//! deployments are not offered older messages (Zeebe's rule).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use qflow_core::{Input, Variables};
use qflow_store::{BufferQuery, BufferedMessage, InstanceId, Store};

use crate::{claim, Error, Runtime, Shared};

/// The sweep's period, on the runtime's clock.
pub const SWEEP_MS: i64 = 5_000;

/// Messages one sweep page reads, waits one offer page reads, expired messages one
/// expiry transaction deletes.
const PAGE: u32 = 256;

/// The most `(name, key)` pairs of opened waits kept for the task's next look-up; past
/// it, waits are left to the sweep.
const OPENED_WAITS_MAX: usize = 10_000;

/// Records that waits for these `(message, correlation key)` pairs opened, and wakes the
/// buffer task to look them up.
pub(crate) fn waits_opened(shared: &Shared, waits: Vec<(String, String)>) {
    if waits.is_empty() {
        return;
    }
    {
        let mut pending = shared.opened_waits.lock().expect("opened waits lock");
        for wait in waits {
            // Bounded: past the cap a wait is left to the sweep.
            if pending.len() < OPENED_WAITS_MAX {
                pending.insert(wait);
            }
        }
    }
    shared.buffer_bell.notify_one();
}

/// A wait a buffered message reached: its instance, node and the step that took it.
pub type Taken = (InstanceId, String, claim::Stepped);

/// Offers `message` to the waits open for it now, oldest wait first, page by page
/// however many there are: each is stepped with the message by
/// `deliver(instance, input, message)`, which must commit with the take of the message
/// it is given (whose takers grow with each delivery here, so a second wait of a process
/// that took it is refused before its step). A wait whose process took the message
/// already, one that ended before its step, and one of an instance gone since are passed
/// over; one whose step fails otherwise (an instance that kept changing, a definition
/// that does not load) is logged and passed over too — the sweep offers it again — so
/// that one wait never keeps the message from the others. Returns the waits that took
/// it; an error only when the waits cannot be listed.
pub async fn offer<F, Fut>(
    store: &dyn Store,
    message: &BufferedMessage,
    mut deliver: F,
) -> Result<Vec<Taken>, Error>
where
    F: FnMut(InstanceId, Input, BufferedMessage) -> Fut,
    Fut: Future<Output = Result<claim::Stepped, Error>>,
{
    let (name, key) = (&message.name, &message.correlation_key);
    let mut page = store.subscriptions(name, key, PAGE).await?;
    if page.is_empty() {
        return Ok(Vec::new());
    }
    let variables: Variables = serde_json::from_str(&message.variables).map_err(|e| {
        Error::Store(format!(
            "buffered message {} holds variables that are not a JSON object: {e}",
            message.id
        ))
    })?;
    let mut delivered = Vec::new();
    let mut current = message.clone();
    loop {
        for s in &page {
            let input = Input::MessageReceived {
                name: name.clone(),
                correlation_key: Some(key.clone()),
                node: Some(s.node.clone()),
                variables: variables.clone(),
            };
            match deliver(s.instance, input, current.clone()).await {
                Ok(stepped) => {
                    let process = &stepped.claim.def.id;
                    if let Err(at) = current.takers.binary_search(process) {
                        current.takers.insert(at, process.clone());
                    }
                    delivered.push((s.instance, s.node.clone(), stepped));
                }
                Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => {}
                Err(Error::ShuttingDown) => return Ok(delivered),
                Err(e) => tracing::warn!(message = message.id, instance = %s.instance,
                    node = %s.node, error = %e,
                    "a kept message did not reach a wait; the sweep offers it again"),
            }
        }
        let Some(last) = page.last().filter(|_| page.len() == PAGE as usize) else {
            return Ok(delivered);
        };
        page = store.subscriptions_after(name, key, last, PAGE).await?;
    }
}

impl Runtime {
    /// Offers buffered `message` to the waits open for it now (see [`offer`]), each
    /// step taken as [`Runtime::claim_and_step_taking`] takes it.
    pub async fn offer_buffered(&self, message: &BufferedMessage) -> Result<Vec<Taken>, Error> {
        offer_in(&self.shared, message).await
    }

    /// Tells the buffer task that steps taken outside this runtime (an operator's
    /// [`crate::Stepper`]) opened these message waits, so that a buffered message due
    /// there is delivered now rather than at the next sweep.
    pub fn waits_opened(&self, waits: &[(String, String)]) {
        waits_opened(&self.shared, waits.to_vec());
    }
}

async fn offer_in(shared: &Shared, message: &BufferedMessage) -> Result<Vec<Taken>, Error> {
    offer(
        &*shared.store,
        message,
        |instance, input, current| async move {
            crate::step_taking(shared, instance, input, Some(&current)).await
        },
    )
    .await
}

/// The buffer's task: looks up the waits that opened whenever it is rung, and sweeps
/// every [`SWEEP_MS`] (at once on start), until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    let mut next_sweep = shared.clock.now_ms();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let opened = std::mem::take(&mut *shared.opened_waits.lock().expect("opened waits lock"));
        look_up(&shared, opened).await;
        let now = shared.clock.now_ms();
        if now >= next_sweep {
            if let Err(e) = sweep(&shared, now).await {
                tracing::warn!(error = %e, "message buffer sweep failed; trying again next round");
            }
            next_sweep = now.saturating_add(SWEEP_MS);
        }
        tokio::select! {
            _ = shared.buffer_bell.notified() => {}
            _ = shared.clock.sleep_until(next_sweep) => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
    }
}

/// Offers the live messages of each opened `(name, key)` to its waits, oldest first; a
/// pair whose look-up fails is logged and left to the sweep, the others still go.
async fn look_up(shared: &Shared, opened: BTreeSet<(String, String)>) {
    for (name, key) in opened {
        let query = BufferQuery {
            name_and_key: Some((&name, &key)),
            after: 0,
            now_ms: shared.clock.now_ms(),
            limit: 0,
        };
        let messages = match shared.store.buffered_messages(query).await {
            Ok(messages) => messages,
            Err(e) => {
                tracing::warn!(message = %name, error = %e,
                    "kept messages for newly opened waits: the sweep offers them");
                continue;
            }
        };
        for message in &messages {
            if let Err(e) = offer_in(shared, message).await {
                tracing::warn!(message = message.id, error = %e,
                    "a kept message was not offered; the sweep offers it again");
            }
        }
    }
}

/// Deletes expired messages, then offers every live one to the waits open for it, page
/// by page past an id cursor.
async fn sweep(shared: &Shared, now: i64) -> Result<(), Error> {
    while shared.store.expire_messages(now, PAGE).await? == u64::from(PAGE) {
        if shared.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
    }
    let mut after = 0;
    loop {
        let page = shared
            .store
            .buffered_messages(BufferQuery {
                name_and_key: None,
                after,
                now_ms: shared.clock.now_ms(),
                limit: PAGE,
            })
            .await?;
        for message in &page {
            if shared.stopping.load(Ordering::SeqCst) {
                return Ok(());
            }
            if let Err(e) = offer_in(shared, message).await {
                tracing::warn!(message = message.id, error = %e,
                    "a kept message was not offered; the next sweep tries again");
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = last.id,
            _ => return Ok(()),
        }
    }
}

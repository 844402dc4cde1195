//! The outbox dispatcher (SPEC C2, C3): claims due rows with a lease, delivers them
//! through their channel's adapter, and records every try on the row.
//!
//! The timer poller's pattern: claim what is due (`FOR UPDATE SKIP LOCKED` on PostgreSQL,
//! so replicas share the outbox), hand each row to a delivery task, and wait for the
//! runtime's lossy hint that a commit emitted rows, for the next due try, or for the poll
//! interval, whichever comes first. A replica that dies leaves its leased rows to lapse
//! and be claimed again: a row is delivered at least once, and every delivery of one
//! attempt carries the same key.
//!
//! A synchronous answer is relayed before the row is recorded as delivered: a crash in
//! between delivers the row again, and the counterpart's repeated answer is judged
//! `already_completed`. When a try fails past the channel's ceiling, the row is poisoned
//! (and an incident opened) in one store transaction, and then the instance is prompted:
//! the dispatcher re-reads the row, and only a poisoned row for exactly that call and
//! attempt becomes a `channel_poisoned` input, which the core judges again under the
//! claim. A prompt lost to a crash is recovered by the call's timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use qflow_core::{CallKey, Input, Variables};
use qflow_runtime::calls::CALL_CHANNEL;
use qflow_runtime::signals::{message_of, signal_of, MESSAGE_CHANNEL, SIGNAL_CHANNEL};
use qflow_runtime::Runtime;
use qflow_store::{DeliveryRecord, OutboxRecord, OutboxState, TimerClaim};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::adapter::{Reply, Request};
use crate::curve::{AfterFailure, DeliveryCurve};
use crate::relay::relay;
use crate::Channels;

/// Dispatcher settings. Every field states its default.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Names this replica in row leases. Default: a random UUID.
    pub owner: String,
    /// How long a claimed row stays leased to this replica. Must exceed every channel's
    /// response timeout, or a row can be delivered twice at once. Default 60,000 ms.
    pub lease_ms: i64,
    /// Most rows claimed per poll. Default 256.
    pub claim_max: u32,
    /// Most deliveries in flight at once. Default 1,024.
    pub in_flight_max: usize,
    /// Longest wait between two polls. Default 50 ms.
    pub poll_interval_ms: u64,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            owner: uuid::Uuid::new_v4().to_string(),
            lease_ms: 60_000,
            claim_max: 256,
            in_flight_max: 1_024,
            poll_interval_ms: 50,
        }
    }
}

/// What the dispatcher did, for progress lines, tests and benchmarks.
#[derive(Debug, Default)]
pub struct DispatchStats {
    /// Delivery tries made.
    pub tries: AtomicU64,
    /// Rows delivered (the counterpart took them).
    pub delivered: AtomicU64,
    /// Tries that failed (each followed by another try, or the poison).
    pub failed_tries: AtomicU64,
    /// Rows poisoned.
    pub poisoned: AtomicU64,
    /// Synchronous answers relayed, by whether they were taken.
    pub answers_taken: AtomicU64,
    pub answers_refused: AtomicU64,
}

/// A running dispatcher.
pub struct Dispatcher {
    task: Option<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    stats: Arc<DispatchStats>,
}

impl Dispatcher {
    /// Starts delivering the outbox of `runtime`'s store through `channels`. Must be
    /// called inside a tokio runtime.
    pub fn start(
        runtime: Arc<Runtime>,
        channels: Arc<Channels>,
        config: DispatcherConfig,
    ) -> Dispatcher {
        let stats = Arc::new(DispatchStats::default());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(runtime, channels, config, stats.clone(), stopped));
        Dispatcher {
            task: Some(task),
            stop,
            stats,
        }
    }

    pub fn stats(&self) -> Arc<DispatchStats> {
        self.stats.clone()
    }

    /// Stops claiming rows and waits for the poll loop to end. Deliveries in flight
    /// finish on their own; a row whose try is not recorded lapses and is tried again.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn run(
    runtime: Arc<Runtime>,
    channels: Arc<Channels>,
    config: DispatcherConfig,
    stats: Arc<DispatchStats>,
    mut stop: watch::Receiver<bool>,
) {
    let slots_max = config.in_flight_max.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(slots_max));
    poll(&runtime, &channels, &config, &stats, &mut stop, &slots).await;
    // Stopped: wait for the deliveries in flight (each bounded by its channel's response
    // timeout), so that nothing of the runtime is still in use when the host shuts it down.
    let _ = slots.acquire_many(slots_max as u32).await;
}

async fn poll(
    runtime: &Arc<Runtime>,
    channels: &Arc<Channels>,
    config: &DispatcherConfig,
    stats: &Arc<DispatchStats>,
    stop: &mut watch::Receiver<bool>,
    slots: &Arc<Semaphore>,
) {
    let clock = runtime.clock();
    let interval_ms = config.poll_interval_ms.max(1) as i64;
    loop {
        if *stop.borrow() {
            return;
        }
        let free = slots.available_permits().min(config.claim_max as usize) as u32;
        if free == 0 {
            // Every slot is busy: wait for one, then poll.
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                permit = slots.clone().acquire_owned() => drop(permit),
            }
            continue;
        }
        let now = clock.now_ms();
        let claim = TimerClaim {
            now_ms: now,
            lease_ms: config.lease_ms,
            owner: &config.owner,
            limit: free,
        };
        let rows = match runtime.store().claim_due_outbox(claim).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "outbox claim failed; trying again");
                Vec::new()
            }
        };
        let full = rows.len() as u32 >= free;
        for row in rows {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let delivery = Delivery {
                runtime: runtime.clone(),
                channels: channels.clone(),
                owner: config.owner.clone(),
                stats: stats.clone(),
            };
            tokio::spawn(async move {
                delivery.deliver(row).await;
                drop(permit);
            });
        }
        if full {
            continue;
        }
        // The claim took every due row nobody holds: a due row left is leased (a delivery
        // in flight, here or on another replica), so only a row due later, a prompt or
        // the poll interval is worth waking for — not a claim per millisecond that finds
        // nothing and takes the store's writer from the lanes.
        let next_due = runtime.store().next_outbox_due().await.ok().flatten();
        let wake_at = match next_due {
            Some(d) if d > now => d.min(now + interval_ms),
            _ => now + interval_ms,
        };
        // `biased`, like the timer poller: on a manual clock the order of ready branches
        // must not come from tokio's random source.
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = runtime.outbox_emitted() => {}
            _ = clock.sleep_until(wake_at) => {}
        }
    }
}

/// One row's delivery try.
struct Delivery {
    runtime: Arc<Runtime>,
    channels: Arc<Channels>,
    owner: String,
    stats: Arc<DispatchStats>,
}

impl Delivery {
    async fn deliver(self, row: OutboxRecord) {
        self.stats.tries.fetch_add(1, Ordering::Relaxed);
        let clock = self.runtime.clock();
        let channel = self.channels.get(&row.channel);
        let signal = row.channel == SIGNAL_CHANNEL;
        let message = row.channel == MESSAGE_CHANNEL;
        let call = row.channel == CALL_CHANNEL;
        let outcome = match (channel, serde_json::from_str::<Variables>(&row.body)) {
            // A call activity's child started or cancelled, or a parent told how its
            // child ended: this engine does it itself, and the row is delivered once
            // that is durable.
            _ if call => self.call(&row).await.map(|()| Reply::Accepted),
            // A signal thrown by an instance: this engine broadcasts it itself, and the
            // row is delivered once every wait and start it reaches is durable.
            _ if signal => self.broadcast(&row).await.map(|()| Reply::Accepted),
            // A message an instance publishes inside the engine: likewise.
            _ if message => self.publish(&row).await.map(|()| Reply::Accepted),
            (None, _) => Err(format!(
                "no channel `{}` is configured on this engine",
                row.channel
            )),
            (_, Err(e)) => Err(format!("the stored request body is not a JSON object: {e}")),
            (Some(channel), Ok(variables)) => {
                let request = Request {
                    channel: row.channel.clone(),
                    idempotency_key: row.key.clone(),
                    call_id: row.call_id.clone(),
                    instance: row.instance.to_string(),
                    node: row.node.clone(),
                    attempt: row.attempt.get(),
                    variables,
                };
                let limit = channel.response_timeout_ms;
                let deadline = clock.now_ms().saturating_add(limit as i64);
                tokio::select! {
                    biased;
                    reply = channel.adapter.deliver(request) => reply.map_err(|e| e.0),
                    _ = clock.sleep_until(deadline) => {
                        Err(format!("no answer within {limit} ms"))
                    }
                }
            }
        };
        let curve = channel.map_or_else(DeliveryCurve::default, |c| c.curve.clone());
        match outcome {
            Ok(Reply::Answer(answer)) => {
                match relay(&self.runtime, &row.key, answer).await {
                    Ok(r) if r.verdict == qflow_core::Verdict::Resumed => {
                        // The commit that took the answer marked the row delivered.
                        self.stats.answers_taken.fetch_add(1, Ordering::Relaxed);
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Ok(r) => {
                        self.stats.answers_refused.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(key = %row.key, verdict = r.verdict.as_str(), reason = %r.reason, "answer not taken");
                    }
                    Err(e) => {
                        // Not recorded as delivered: the row is tried again when its lease
                        // lapses, and the counterpart's repeated answer relayed again.
                        tracing::warn!(key = %row.key, error = %e, "relaying an answer failed");
                        return;
                    }
                }
                self.record(&row, DeliveryRecord::Delivered).await;
            }
            Ok(Reply::Accepted) => {
                self.record(&row, DeliveryRecord::Delivered).await;
            }
            Err(error) => {
                self.stats.failed_tries.fetch_add(1, Ordering::Relaxed);
                let tries = row.deliveries.saturating_add(1);
                match curve.after_failure(tries) {
                    AfterFailure::RetryIn(ms) => {
                        let retry_at_ms = clock.now_ms().saturating_add(ms as i64);
                        let record = DeliveryRecord::Failed { error, retry_at_ms };
                        self.record(&row, record).await;
                    }
                    AfterFailure::Poison => {
                        let error = format!("{error} (after {tries} delivery tries)");
                        let record = DeliveryRecord::Poisoned {
                            error: error.clone(),
                        };
                        if self.record(&row, record).await {
                            self.stats.poisoned.fetch_add(1, Ordering::Relaxed);
                            self.wake(&row.key, error).await;
                        }
                    }
                }
            }
        }
    }

    /// Broadcasts the signal of a signal row (`qflow_runtime::signals`), named by the
    /// row's key so that a redelivery starts no instance twice.
    async fn broadcast(&self, row: &OutboxRecord) -> Result<(), String> {
        let Some(name) = signal_of(&row.body) else {
            return Err("the stored signal row names no signal".to_owned());
        };
        match self
            .runtime
            .broadcast_signal(&name, &Variables::new(), &row.key)
            .await
        {
            Ok(done) => {
                tracing::debug!(key = %row.key, signal = %name, caught = done.caught.len(),
                    started = done.started.len(), "signal broadcast");
                Ok(())
            }
            Err(e) => Err(format!("broadcasting signal `{name}`: {e}")),
        }
    }

    /// Publishes the message of a message row inside the engine
    /// (`Runtime::publish_message`), named by the row's key.
    async fn publish(&self, row: &OutboxRecord) -> Result<(), String> {
        let Some((name, key, variables)) = message_of(&row.body) else {
            return Err("the stored message row names no message".to_owned());
        };
        match self
            .runtime
            .publish_message(&name, key.as_deref(), &variables, &row.key)
            .await
        {
            Ok(published) => {
                tracing::debug!(key = %row.key, message = %name, ?published, "message published");
                Ok(())
            }
            Err(e) => Err(format!("publishing message `{name}`: {e}")),
        }
    }

    /// Carries out a call activity's row (`Runtime::deliver_call`).
    async fn call(&self, row: &OutboxRecord) -> Result<(), String> {
        self.runtime
            .deliver_call(row.instance, &row.node, &row.call_id, &row.body)
            .await
            .map_err(|e| format!("call activity row `{}`: {e}", row.key))
    }

    /// Records the try; whether it applied (the row was still ours and pending).
    async fn record(&self, row: &OutboxRecord, record: DeliveryRecord) -> bool {
        let delivered = matches!(record, DeliveryRecord::Delivered);
        let now = self.runtime.clock().now_ms();
        match self
            .runtime
            .store()
            .record_delivery(&row.key, &self.owner, now, record)
            .await
        {
            Ok(applied) => {
                if applied && delivered {
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                }
                applied
            }
            Err(e) => {
                tracing::warn!(key = %row.key, error = %e, "recording a delivery try failed");
                false
            }
        }
    }

    /// The poison prompt: only a row re-read as poisoned, for exactly the call and
    /// attempt its key names, becomes an input; the core judges it again under the claim.
    async fn wake(&self, key: &str, message: String) {
        let row = match self.runtime.store().outbox_row(key).await {
            Ok(Some(row)) if row.state == OutboxState::Poisoned => row,
            _ => return,
        };
        let Some(k) = CallKey::parse(&row.key) else {
            return;
        };
        if k.attempt != row.attempt || k.instance != row.instance.to_string() {
            return;
        }
        let input = Input::ChannelPoisoned {
            call: k.call,
            attempt: k.attempt,
            message,
        };
        match self.runtime.send(row.instance, input).await {
            Ok(()) | Err(qflow_runtime::Error::Refused { .. }) => {}
            Err(e) => {
                tracing::warn!(key, error = %e, "the poison prompt was not delivered; the call's timeout will find it")
            }
        }
    }
}

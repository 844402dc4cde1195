//! Channel calls through a durable outbox (SPEC §5, C1–C9): the channels a host or the
//! configuration file names, their adapters (`adapter`: in-process and HTTP webhook), the
//! delivery curve of each (`curve`), the dispatcher that delivers the outbox
//! (`dispatcher`), the relay that hands answers back with an honest verdict (`relay`),
//! and the Standard Webhooks signatures (`signature`).
//!
//! This crate never reaches into an instance's state: the core emits requests as effects
//! the runtime writes into the outbox in the step's own transaction, and answers come
//! back as inputs stepped under the instance's claim. See `docs/channels.md`.

pub mod adapter;
pub mod config;
pub mod curve;
pub mod dispatcher;
pub mod relay;
pub mod signature;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use adapter::{
    Adapter, Answer, BpmnError, DeliveryError, ExtraRoots, InProcess, Reply, Request, Webhook,
    WebhookBuilder,
};
pub use config::{ChannelSettings, ConfigError};
pub use curve::DeliveryCurve;
pub use dispatcher::{DispatchStats, Dispatcher, DispatcherConfig};
pub use relay::{relay, RelayError, Relayed};
pub use signature::Secret;

/// The default time an adapter has to deliver one request and answer (or accept it).
pub const RESPONSE_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// One configured channel.
pub struct Channel {
    pub name: String,
    pub adapter: Arc<dyn Adapter>,
    pub curve: DeliveryCurve,
    /// A try that has not answered (or been accepted) by then has failed.
    pub response_timeout_ms: u64,
}

/// The channels of one engine, by name.
#[derive(Default)]
pub struct Channels {
    by_name: BTreeMap<String, Channel>,
}

impl Channels {
    pub fn new() -> Channels {
        Channels::default()
    }

    /// Adds (or replaces) a channel.
    pub fn add(&mut self, channel: Channel) {
        self.by_name.insert(channel.name.clone(), channel);
    }

    /// Adds an in-process channel: `f` is the counterpart, called once per delivery.
    pub fn in_process<F>(&mut self, name: &str, curve: DeliveryCurve, f: F)
    where
        F: Fn(Request) -> futures::future::BoxFuture<'static, Result<Reply, DeliveryError>>
            + Send
            + Sync
            + 'static,
    {
        self.add(Channel {
            name: name.to_owned(),
            adapter: Arc::new(InProcess(f)),
            curve,
            response_timeout_ms: RESPONSE_TIMEOUT_MS_DEFAULT,
        });
    }

    pub fn get(&self, name: &str) -> Option<&Channel> {
        self.by_name.get(name)
    }

    /// The channel names, sorted: what `RuntimeConfig::channels` is given, so that a
    /// deployment naming any other channel is refused.
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The channels, by name.
    pub fn into_channels(self) -> impl Iterator<Item = Channel> {
        self.by_name.into_values()
    }
}

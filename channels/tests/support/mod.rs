//! What the channel tests share: a runtime and a dispatcher that poll every millisecond,
//! so a test driven by a manual clock never waits on a poll interval.

use std::sync::Arc;

use qflow_channels::{Channels, Dispatcher, DispatcherConfig};
use qflow_runtime::{AsyncHandlers, ManualClock, Runtime, RuntimeConfig};
use qflow_store::Store;

/// One lane on `store` and `clock`, knowing `channels`; `config` changes anything else.
pub fn runtime(
    store: &Arc<dyn Store>,
    clock: &Arc<ManualClock>,
    channels: &Channels,
    handlers: AsyncHandlers,
    config: impl FnOnce(&mut RuntimeConfig),
) -> Arc<Runtime> {
    let mut c = RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        channels: channels.names(),
        ..RuntimeConfig::default()
    };
    config(&mut c);
    Arc::new(Runtime::start(store.clone(), handlers, clock.clone(), c))
}

/// The outbox dispatcher of `runtime`, delivering to `channels`.
pub fn dispatcher(runtime: &Arc<Runtime>, channels: Channels) -> Dispatcher {
    Dispatcher::start(
        runtime.clone(),
        Arc::new(channels),
        DispatcherConfig {
            poll_interval_ms: 1,
            ..DispatcherConfig::default()
        },
    )
}

//! One engine on a store, as the durable feature tests drive it: a runtime and, when
//! asked, the outbox's dispatcher with no channels (which carries out the engine's own
//! rows: signal broadcasts, message publications, call activities), with an `Ops` over
//! them; and the bounded wait those tests poll with.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_channels::{Channels, Dispatcher, DispatcherConfig};
use qflow_ops::Ops;
use qflow_runtime::Runtime;
use qflow_store::Store;

use crate::{fast_recovery_config, start_runtime};

/// How long [`eventually`] waits before it fails the test.
pub const LIMIT: Duration = Duration::from_secs(20);

pub struct Engine {
    pub runtime: Arc<Runtime>,
    pub dispatcher: Option<Dispatcher>,
    pub ops: Ops,
}

impl Engine {
    /// A one-lane runtime on `store`; with `deliver`, a dispatcher polling every 20 ms.
    /// `who` names the operator in the audit log.
    pub fn start(store: Arc<dyn Store>, deliver: bool, who: &str) -> Engine {
        let runtime = Arc::new(start_runtime(store, fast_recovery_config(1)));
        let dispatcher = deliver.then(|| {
            let config = DispatcherConfig {
                poll_interval_ms: 20,
                ..DispatcherConfig::default()
            };
            Dispatcher::start(runtime.clone(), Arc::new(Channels::new()), config)
        });
        let ops = Ops::with_runtime(runtime.clone(), who);
        Engine {
            runtime,
            dispatcher,
            ops,
        }
    }

    /// Stops the dispatcher, then the runtime (which must be in no other hands).
    pub async fn stop(self) {
        if let Some(d) = self.dispatcher {
            d.shutdown().await;
        }
        drop(self.ops);
        match Arc::try_unwrap(self.runtime) {
            Ok(rt) => rt.shutdown().await,
            Err(_) => panic!("the runtime is still in use"),
        }
    }
}

/// Polls `check` every 10 ms until it holds; fails the test after [`LIMIT`].
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let began = Instant::now();
    while !check().await {
        assert!(began.elapsed() < LIMIT, "{what}: not within {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

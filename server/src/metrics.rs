//! Prometheus metrics in the text exposition format (version 0.0.4): the runtime's
//! counters and the HTTP requests this server answered, with a latency histogram.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use qflow_runtime::StatsView;

/// Upper bounds of the request-latency buckets, in seconds.
const BUCKETS_S: [f64; 12] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Request counters by status class and a latency histogram, updated lock-free.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    by_class: [AtomicU64; 5],
    buckets: [AtomicU64; BUCKETS_S.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl HttpMetrics {
    pub fn observe(&self, status: u16, micros: u64) {
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
        let seconds = micros as f64 / 1e6;
        for (bound, bucket) in BUCKETS_S.iter().zip(&self.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(micros, Ordering::Relaxed);
    }
}

/// The whole exposition: runtime counters (when a runtime serves this server) and HTTP.
pub fn render(runtime: Option<StatsView>, http: &HttpMetrics) -> String {
    let mut out = String::new();
    if let Some(s) = runtime {
        let counters: [(&str, &str, u64); 11] = [
            ("instances_started", "Instances started.", s.started),
            ("instances_completed", "Instances completed.", s.completed),
            ("instances_failed", "Instances that ended FAILED.", s.failed),
            ("instances_cancelled", "Instances cancelled.", s.cancelled),
            (
                "handler_calls",
                "Handler calls, re-adopted ones included.",
                s.handler_calls,
            ),
            (
                "backoff_parks",
                "Backoff parks armed (durable timer rows).",
                s.parks,
            ),
            (
                "timers_fired",
                "Due timers handed to the lanes.",
                s.timers_fired,
            ),
            (
                "step_conflicts",
                "Steps whose commit lost the fence compare-and-swap.",
                s.conflicts,
            ),
            ("steps", "Steps committed.", s.steps),
            (
                "commits",
                "Store batches committed (group commits).",
                s.batches,
            ),
            (
                "instances_purged",
                "Ended instances deleted after their retention.",
                s.purged,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP qflow_{name}_total {help}");
            let _ = writeln!(out, "# TYPE qflow_{name}_total counter");
            let _ = writeln!(out, "qflow_{name}_total {value}");
        }
    }
    let _ = writeln!(
        out,
        "# HELP qflow_http_requests_total HTTP requests answered, by status class."
    );
    let _ = writeln!(out, "# TYPE qflow_http_requests_total counter");
    for (i, n) in http.by_class.iter().enumerate() {
        let _ = writeln!(
            out,
            "qflow_http_requests_total{{class=\"{}xx\"}} {}",
            i + 1,
            n.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP qflow_http_request_duration_seconds Time to answer a request."
    );
    let _ = writeln!(out, "# TYPE qflow_http_request_duration_seconds histogram");
    for (bound, bucket) in BUCKETS_S.iter().zip(&http.buckets) {
        let _ = writeln!(
            out,
            "qflow_http_request_duration_seconds_bucket{{le=\"{bound}\"}} {}",
            bucket.load(Ordering::Relaxed)
        );
    }
    let count = http.count.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "qflow_http_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "qflow_http_request_duration_seconds_sum {}",
        http.sum_us.load(Ordering::Relaxed) as f64 / 1e6
    );
    let _ = writeln!(out, "qflow_http_request_duration_seconds_count {count}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_classes_counted() {
        let m = HttpMetrics::default();
        m.observe(200, 700);
        m.observe(404, 30_000);
        m.observe(503, 9_000_000);
        let text = render(None, &m);
        assert!(
            text.contains("qflow_http_requests_total{class=\"2xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("qflow_http_requests_total{class=\"4xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("qflow_http_requests_total{class=\"5xx\"} 1"),
            "{text}"
        );
        assert!(text.contains("_bucket{le=\"0.0005\"} 0"), "{text}");
        assert!(text.contains("_bucket{le=\"0.001\"} 1"), "{text}");
        assert!(text.contains("_bucket{le=\"0.05\"} 2"), "{text}");
        assert!(text.contains("_bucket{le=\"5\"} 2"), "{text}");
        assert!(text.contains("_bucket{le=\"+Inf\"} 3"), "{text}");
    }
}

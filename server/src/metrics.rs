//! Prometheus metrics in the text exposition format (version 0.0.4): the runtime's
//! counters and the HTTP requests this server answered, with a latency histogram.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use qflow_ops::InstanceCounts;
use qflow_runtime::histogram::{Histogram, HistogramView};
use qflow_runtime::Stats;

/// Request counters by status class and a latency histogram, updated lock-free.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    by_class: [AtomicU64; 5],
    latency: Histogram,
}

impl HttpMetrics {
    pub fn observe(&self, status: u16, micros: u64) {
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
        self.latency.observe_us(micros);
    }
}

/// The whole exposition: instances by state (when the store answered), the runtime's
/// counters and histograms (when a runtime serves this server), and HTTP.
pub fn render(
    counts: Option<InstanceCounts>,
    runtime: Option<&Stats>,
    http: &HttpMetrics,
) -> String {
    let mut out = String::new();
    if let Some(c) = counts {
        let _ = writeln!(
            out,
            "# HELP qflow_instances Instances in the store, by state."
        );
        let _ = writeln!(out, "# TYPE qflow_instances gauge");
        for (state, n) in [
            ("running", c.running),
            ("completed", c.completed),
            ("failed", c.failed),
            ("cancelled", c.cancelled),
        ] {
            let _ = writeln!(out, "qflow_instances{{state=\"{state}\"}} {n}");
        }
    }
    if let Some(stats) = runtime {
        histogram(
            &mut out,
            "qflow_step_duration_seconds",
            "Time from a lane round's start to its steps being durable, per committed step.",
            &stats.step_latency.view(),
        );
        histogram(
            &mut out,
            "qflow_timer_lag_seconds",
            "How late due timers were when the poller claimed them.",
            &stats.timer_lag.view(),
        );
    }
    if let Some(s) = runtime.map(Stats::view) {
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
    histogram(
        &mut out,
        "qflow_http_request_duration_seconds",
        "Time to answer a request.",
        &http.latency.view(),
    );
    out
}

fn histogram(out: &mut String, name: &str, help: &str, h: &HistogramView) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (bound, n) in &h.buckets {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum_seconds);
    let _ = writeln!(out, "{name}_count {}", h.count);
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
        let text = render(None, None, &m);
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
        assert!(
            !text.contains("qflow_instances{"),
            "no counts, no gauge: {text}"
        );
        assert!(text.contains("_bucket{le=\"+Inf\"} 3"), "{text}");
    }

    #[test]
    fn instance_counts_and_runtime_histograms_are_rendered() {
        let stats = Stats::default();
        stats.step_latency.observe_us(3_000);
        stats.timer_lag.observe_ms(40);
        let counts = InstanceCounts {
            running: 4,
            completed: 10,
            failed: 2,
            cancelled: 0,
        };
        let text = render(Some(counts), Some(&stats), &HttpMetrics::default());
        for line in [
            "qflow_instances{state=\"running\"} 4",
            "qflow_instances{state=\"failed\"} 2",
            "qflow_instances{state=\"cancelled\"} 0",
            "qflow_step_duration_seconds_bucket{le=\"0.0025\"} 0",
            "qflow_step_duration_seconds_bucket{le=\"0.005\"} 1",
            "qflow_step_duration_seconds_count 1",
            "qflow_timer_lag_seconds_bucket{le=\"0.025\"} 0",
            "qflow_timer_lag_seconds_bucket{le=\"0.05\"} 1",
            "qflow_steps_total 0",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }
}

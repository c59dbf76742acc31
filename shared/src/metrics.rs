//! What a Lambda invocation observed, gathered as it runs and printed at its end as Embedded
//! Metric Format lines ([`crate::domain::metrics`]): one JSON line per set of dimension values,
//! on stdout, which Lambda sends to CloudWatch Logs, which extracts the metrics. No API call,
//! nothing to grant. Handlers record through the context's recorder (`Ctx::metrics`); the
//! Lambda main and the local runtime take what was recorded after each invocation.

use crate::domain::metrics::{emf_documents, Kind, Metric, Observed};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The observations of the invocation under way.
#[derive(Debug, Default)]
pub struct Metrics {
    observed: Mutex<BTreeMap<Observed, Vec<f64>>>,
}

impl Metrics {
    /// `n` more of a counted metric.
    pub fn count(&self, metric: Metric, dimensions: &[(&'static str, &str)], n: u64) {
        if n > 0 {
            self.observe(metric, dimensions, n as f64);
        }
    }

    /// One value of a metric (a sampled one, or one occurrence of a counted one).
    pub fn observe(&self, metric: Metric, dimensions: &[(&'static str, &str)], value: f64) {
        let key = Observed {
            metric,
            dimensions: dimensions
                .iter()
                .map(|(k, v)| (*k, (*v).to_owned()))
                .collect(),
        };
        // A poisoned lock means a handler panicked mid-record: its observations still count.
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        let values = observed.entry(key).or_default();
        match (metric.spec().kind, values.first_mut()) {
            // A counted metric is published as its sum (`emf_documents`): kept as one running
            // sum, not a value per occurrence. A recorder that lives long (the local runtime's
            // one context for a whole campaign) would otherwise keep a number per granule per
            // metric — ~400 MB over ten million granules.
            (Kind::Count, Some(sum)) => *sum += value,
            _ => values.push(value),
        }
    }

    /// Everything observed since the last take, as EMF documents, leaving nothing behind.
    pub fn take_documents(
        &self,
        stack: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<serde_json::Value> {
        let observed =
            std::mem::take(&mut *self.observed.lock().unwrap_or_else(|p| p.into_inner()));
        emf_documents(stack, now.timestamp_millis(), &observed)
    }

    /// Prints what was observed, one EMF line each, to stdout (a Lambda's log).
    pub fn print(&self, stack: &str) {
        for doc in self.take_documents(stack, crate::clock::now()) {
            println!("{doc}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_kept_as_their_sum_and_samples_each() {
        let metrics = Metrics::default();
        for _ in 0..1000 {
            metrics.count(Metric::GranulesSucceeded, &[("Platform", "S30")], 1);
        }
        metrics.observe(Metric::FeederRowsLeft, &[], 7.0);
        metrics.observe(Metric::FeederRowsLeft, &[], 3.0);
        {
            let observed = metrics.observed.lock().unwrap();
            let mut lengths: Vec<usize> = observed.values().map(Vec::len).collect();
            lengths.sort();
            assert_eq!(lengths, vec![1, 2], "{observed:?}");
        }
        let docs = metrics.take_documents("s", chrono::Utc::now());
        let succeeded: f64 = docs
            .iter()
            .filter_map(|d| d["GranulesSucceeded"].as_f64())
            .sum();
        assert_eq!(succeeded, 1000.0);
        let left: Vec<&serde_json::Value> = docs
            .iter()
            .filter_map(|d| d.get("FeederRowsLeft"))
            .collect();
        assert_eq!(left, vec![&serde_json::json!([7.0, 3.0])]);
    }
}

//! What a Lambda invocation observed, gathered as it runs and printed at its end as Embedded
//! Metric Format lines ([`crate::domain::metrics`]): one JSON line per set of dimension values,
//! on stdout, which Lambda sends to CloudWatch Logs, which extracts the metrics. No API call,
//! nothing to grant. Handlers record through the context's recorder (`Ctx::metrics`); the
//! Lambda main and the local runtime take what was recorded after each invocation.

use crate::domain::metrics::{emf_documents, Metric, Observed};
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
        observed.entry(key).or_default().push(value);
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
        for doc in self.take_documents(stack, chrono::Utc::now()) {
            println!("{doc}");
        }
    }
}

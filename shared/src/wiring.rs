//! Wiring: the one module that builds adapters — AWS clients from the environment, the in-memory
//! twins, and the taps that decorate them. Handlers see only ports; Lambda mains call
//! [`Ctx::from_env`] and [`init_lambda_tracing`], nothing else.

use crate::adapters::aws::EventBridgeBus;
use crate::adapters::aws::{AwsClients, BatchJobRunner, S3PrefixSource, S3Store, SqsQueue};
use crate::adapters::http::remote::HttpRemote;
use crate::adapters::http::HttpIndexSource;
use crate::adapters::unset::{UnsetJobRunner, UnsetQueue};
use crate::config::{Config, Function, Section};
use crate::handlers::importer::{timeout, ObjectsExist};
use crate::handlers::Ctx;
use crate::ports::{JobRunner, Queue, Source, SourceError};
use std::sync::Arc;

impl Ctx {
    /// Wires the AWS adapters from the config; the ports of a section it lacks refuse every call.
    /// The archive signing key is loaded by [`Ctx::from_env`] (it reads SSM).
    pub fn aws(config: Config, clients: &AwsClients) -> Result<Self, InitError> {
        let jobs: Arc<dyn JobRunner> = match &config.jobs {
            Some(j) => {
                let batch: Arc<dyn JobRunner> = Arc::new(
                    BatchJobRunner::new(clients.batch.clone(), &j.job_queue, &j.job_definition)
                        .listing_also(j.other_queues()),
                );
                // Paced to this function's share of the account's SubmitJob budget.
                match j.submit_spacing {
                    Some(spacing) => Arc::new(crate::adapters::paced::PacedJobs {
                        inner: batch,
                        pacer: crate::adapters::paced::Pacer::spaced(spacing),
                    }),
                    None => batch,
                }
            }
            None => Arc::new(UnsetJobRunner),
        };
        let sqs = |url: Option<&str>, var: &'static str| -> Arc<dyn Queue> {
            match url {
                Some(url) => Arc::new(SqsQueue::new(clients.sqs.clone(), url)),
                None => Arc::new(UnsetQueue { var }),
            }
        };
        let queues = config.queues.as_ref();
        let importer = &config.importer;
        let source: Option<Arc<dyn Source>> = match importer.source_url.as_deref() {
            None => None,
            Some(url) if url.starts_with("s3://") => {
                Some(Arc::new(S3PrefixSource::from_url(clients.s3.clone(), url)?))
            }
            Some(url) => Some(Arc::new(HttpIndexSource::new(
                url,
                timeout(&config),
                importer.discover_concurrency,
            )?)),
        };
        Ok(Self {
            store: Arc::new(S3Store::new(clients.s3.clone(), &config.layout.bucket)),
            jobs,
            retry_queue: sqs(
                queues.map(|q| q.retry_queue_url.as_str()),
                "GRANARY_RETRY_QUEUE_URL",
            ),
            failure_dlq: sqs(
                queues.map(|q| q.failure_dlq_url.as_str()),
                "GRANARY_FAILURE_DLQ_URL",
            ),
            source,
            import_queue: importer
                .import_queue_url
                .as_deref()
                .map(|u| Arc::new(SqsQueue::new(clients.sqs.clone(), u)) as Arc<dyn Queue>),
            prerequisites: Arc::new(ObjectsExist {
                templates: importer.prerequisites.clone(),
            }),
            remote: Arc::new(HttpRemote::new(config.ingest.timeout)),
            bus: Arc::new(EventBridgeBus::new(
                clients.events.clone(),
                config.ingest.bus_name.clone(),
            )),
            buckets: Arc::new(crate::adapters::aws::S3Buckets::new(clients.s3.clone())),
            task_queue: sqs(
                config.archive.task_queue_url.as_deref(),
                "GRANARY_ARCHIVE_TASK_QUEUE_URL",
            ),
            downstream: (config.feeder.downstream.as_ref()).map(|d| {
                Arc::new(SqsQueue::new(clients.sqs.clone(), &d.queue_url)) as Arc<dyn Queue>
            }),
            signing_key: None,
            // Made by [`Ctx::aws_with_signing_key`], which reads its credentials from SSM.
            minter: None,
            window_granules: Arc::default(),
            open_windows: Arc::default(),
            end_window: Arc::default(),
            metrics: Arc::default(),
            config,
        })
    }

    /// In-memory twins of every port (no source; an import queue only if one is configured).
    pub fn in_memory(config: Config) -> Self {
        use crate::adapters::memory::{
            MemoryBuckets, MemoryEventBus, MemoryJobRunner, MemoryQueue, MemoryRemote, MemoryStore,
        };
        let (retry, dlq) = config.queue_names();
        Self {
            store: Arc::new(MemoryStore::new()),
            jobs: Arc::new(MemoryJobRunner::default()),
            retry_queue: Arc::new(MemoryQueue::new(&retry)),
            failure_dlq: Arc::new(MemoryQueue::new(&dlq)),
            source: None,
            import_queue: config
                .importer
                .import_queue_url
                .as_deref()
                .map(|u| Arc::new(MemoryQueue::new(u)) as Arc<dyn Queue>),
            prerequisites: Arc::new(ObjectsExist {
                templates: config.importer.prerequisites.clone(),
            }),
            remote: Arc::new(MemoryRemote::default()),
            bus: Arc::new(MemoryEventBus::default()),
            buckets: Arc::new(MemoryBuckets::default()),
            task_queue: Arc::new(MemoryQueue::new("archive-tasks")),
            downstream: (config.feeder.downstream.as_ref())
                .map(|d| Arc::new(MemoryQueue::new(&d.queue_url)) as Arc<dyn Queue>),
            signing_key: None,
            minter: None,
            window_granules: Arc::default(),
            open_windows: Arc::default(),
            end_window: Arc::default(),
            metrics: Arc::default(),
            config,
        }
    }

    /// The context a Lambda runs with: its function's sections from the environment, the AWS
    /// adapters, and the archive signing key from SSM when it reads the Archive section.
    pub async fn from_env(f: Function) -> Result<Self, InitError> {
        Self::for_sections_from_env(f.sections()).await
    }

    /// Like [`Ctx::from_env`], for exactly `sections` (an operator's command).
    pub async fn for_sections_from_env(sections: &[Section]) -> Result<Self, InitError> {
        let config = Config::for_sections(sections, |k| std::env::var(k).ok())?;
        Self::aws_with_signing_key(config, &AwsClients::from_env().await).await
    }

    /// [`Ctx::aws`], with the archive signing key read from SSM when the configuration names its
    /// parameter (`GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER`).
    pub async fn aws_with_signing_key(
        config: Config,
        clients: &AwsClients,
    ) -> Result<Self, InitError> {
        let mut ctx = Self::aws(config, clients)?;
        if let Some(name) = ctx.config.archive.signing_key_parameter.clone() {
            let seed = crate::adapters::aws::load_signing_seed(&clients.ssm, &name)
                .await
                .map_err(|e| InitError::SigningKey(e.to_string()))?;
            let key = crate::domain::archive::manifest::signing_key(&seed)
                .map_err(|e| InitError::SigningKey(format!("SSM parameter {name}: {e}")))?;
            ctx.signing_key = Some(Arc::new(key));
        }
        if let Some(ezid) = ctx.config.ingest.ezid.clone() {
            let credentials = match &ezid.credentials_parameter {
                None => None,
                Some(name) => {
                    let raw = crate::adapters::aws::load_secure_parameter(&clients.ssm, name)
                        .await
                        .map_err(|e| InitError::Secret(e.to_string()))?;
                    Some(
                        crate::adapters::http::ezid::parse_credentials(&raw).ok_or_else(|| {
                            InitError::Secret(format!(
                                "SSM parameter {name} must hold user:password for EZID"
                            ))
                        })?,
                    )
                }
            };
            // A mint waits at most a minute: EZID answers in well under a second, and a longer
            // wait would only hold the dispatcher's pass (and leave the outcome unknown anyway).
            let timeout = ctx
                .config
                .ingest
                .timeout
                .min(std::time::Duration::from_secs(60));
            ctx.minter = Some(Arc::new(crate::adapters::http::ezid::HttpMinter::new(
                &ezid.url,
                credentials,
                timeout,
            )));
        }
        Ok(ctx)
    }

    /// The same context with every port's calls passing through `tap`, as a new (cold)
    /// instance: nothing read is kept (a crash-point tap ends the instance it kills).
    pub fn tapped(&self, tap: Arc<dyn crate::adapters::tap::Tap>) -> Self {
        self.through(tap, Instance::Cold)
    }

    /// [`Self::tapped`] for a tap that only watches (counts, records what was accessed): the same
    /// warm instance, its caches kept. The bench's per-function counts went through `tapped`
    /// at first and made every invocation a cold one: the feeder re-read every open window's
    /// claim, and ten million granules' claim GETs rose from 0.016 a granule to 0.115.
    pub fn watched(&self, tap: Arc<dyn crate::adapters::tap::Tap>) -> Self {
        self.through(tap, Instance::Warm)
    }

    fn through(&self, tap: Arc<dyn crate::adapters::tap::Tap>, instance: Instance) -> Self {
        use crate::adapters::tap::{
            TappedBuckets, TappedBus, TappedJobs, TappedQueue, TappedRemote, TappedSource,
            TappedStore,
        };
        let queue = |q: &Arc<dyn Queue>| -> Arc<dyn Queue> {
            Arc::new(TappedQueue {
                inner: q.clone(),
                tap: tap.clone(),
            })
        };
        Self {
            store: Arc::new(TappedStore {
                inner: self.store.clone(),
                tap: tap.clone(),
            }),
            jobs: Arc::new(TappedJobs {
                inner: self.jobs.clone(),
                tap: tap.clone(),
            }),
            retry_queue: queue(&self.retry_queue),
            failure_dlq: queue(&self.failure_dlq),
            source: self.source.as_ref().map(|s| {
                Arc::new(TappedSource {
                    inner: s.clone(),
                    tap: tap.clone(),
                    url: (self.config.importer.source_url.clone())
                        .unwrap_or_else(|| "(unnamed source)".to_owned()),
                }) as Arc<dyn Source>
            }),
            import_queue: self.import_queue.as_ref().map(queue),
            prerequisites: self.prerequisites.clone(),
            remote: Arc::new(TappedRemote {
                inner: self.remote.clone(),
                tap: tap.clone(),
            }),
            bus: Arc::new(TappedBus {
                inner: self.bus.clone(),
                tap: tap.clone(),
            }),
            buckets: Arc::new(TappedBuckets {
                inner: self.buckets.clone(),
                tap: tap.clone(),
            }),
            task_queue: queue(&self.task_queue),
            downstream: self.downstream.as_ref().map(queue),
            signing_key: self.signing_key.clone(),
            minter: self.minter.as_ref().map(|m| {
                Arc::new(crate::adapters::tap::TappedMinter {
                    inner: m.clone(),
                    tap: tap.clone(),
                }) as Arc<dyn crate::ports::Minter>
            }),
            // A crash ends the instance: the next one starts with nothing read.
            window_granules: match instance {
                Instance::Warm => self.window_granules.clone(),
                Instance::Cold => Arc::default(),
            },
            open_windows: match instance {
                Instance::Warm => self.open_windows.clone(),
                Instance::Cold => Arc::default(),
            },
            // What the monitor judged so far stays the instance's (the local runtime's one
            // warm instance); it only ever decides a hold.
            end_window: self.end_window.clone(),
            metrics: self.metrics.clone(),
            config: self.config.clone(),
        }
    }

    /// The same context with every external call passing through `faults` (crash-point harness,
    /// `granary-local chaos`).
    pub fn with_faults(&self, faults: &Arc<crate::adapters::tap::faults::Faults>) -> Self {
        self.tapped(faults.clone())
    }
}

/// Whether a context wrapped in a tap is the same Lambda instance (its caches kept) or a new one.
#[derive(Clone, Copy)]
enum Instance {
    Warm,
    Cold,
}

pub fn s3_store(clients: &AwsClients, bucket: &str) -> Arc<dyn crate::ports::ObjectStore> {
    Arc::new(S3Store::new(clients.s3.clone(), bucket))
}

pub fn sqs_queue(clients: &AwsClients, url: &str) -> Arc<dyn Queue> {
    Arc::new(SqsQueue::new(clients.sqs.clone(), url))
}

/// What can stop a Lambda at init.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("the archive signing key: {0}")]
    SigningKey(String),
    #[error("a secret from SSM: {0}")]
    Secret(String),
}

/// Logging setup shared by the Lambda binaries: JSON lines (CloudWatch Logs Insights parses them),
/// level from RUST_LOG (default info).
pub fn init_lambda_tracing() {
    let _ = tracing::subscriber::set_global_default(json_logs(std::io::stdout));
}

/// The Lambdas' log format, writing to `writer`: one JSON object a line, each carrying the spans
/// it was written in (`spans`: the SQS record's message id, the Batch event's granule, attempt
/// and job, the archive job…), so one id can be followed through the logs.
pub fn json_logs<W>(writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_span_list(true)
        .with_target(false)
        .without_time() // CloudWatch stamps every line
        .with_writer(writer)
        .finish()
}

/// Runs one invocation's handling, then prints the metrics it observed (one Embedded Metric
/// Format line per set of dimension values, on stdout, which Lambda sends to CloudWatch Logs),
/// whatever the outcome: a failed invocation's observations happened too. An invocation that
/// dies prints none (metrics are what was seen, not the proof: the logs and records are).
pub async fn metered<T>(ctx: &Ctx, handling: impl std::future::Future<Output = T>) -> T {
    let out = handling.await;
    ctx.metrics.print(&ctx.config.stack);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::tap::counting::RequestCounts;

    #[test]
    fn a_watched_context_is_the_same_warm_instance_and_a_tapped_one_a_cold_one() {
        let ctx = Ctx::in_memory(crate::config::Config::for_unit_tests(&[]));
        let watched = ctx.watched(Arc::new(RequestCounts::totals_only()));
        assert!(Arc::ptr_eq(&watched.window_granules, &ctx.window_granules));
        assert!(Arc::ptr_eq(&watched.open_windows, &ctx.open_windows));
        let tapped = ctx.tapped(Arc::new(RequestCounts::totals_only()));
        assert!(!Arc::ptr_eq(&tapped.window_granules, &ctx.window_granules));
        assert!(!Arc::ptr_eq(&tapped.open_windows, &ctx.open_windows));
        // Both keep what decides a hold.
        assert!(Arc::ptr_eq(&tapped.end_window, &ctx.end_window));
    }
}

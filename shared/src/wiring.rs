//! Wiring: the one module that builds adapters — AWS clients from the environment, the in-memory
//! twins, and the taps that decorate them. Handlers see only ports; Lambda mains call
//! [`Ctx::from_env`] / [`Importer::from_env`] and [`init_lambda_tracing`], nothing else.

use crate::adapters::aws::EventBridgeBus;
use crate::adapters::aws::{AwsClients, BatchJobRunner, S3PrefixSource, S3Store, SqsQueue};
use crate::adapters::http::remote::HttpRemote;
use crate::adapters::http::HttpIndexSource;
use crate::adapters::unset::{UnsetJobRunner, UnsetQueue};
use crate::config::{Config, Function, Section};
use crate::handlers::importer::{timeout, Importer, ObjectsExist};
use crate::handlers::ingest::{IngestCtx, ProcessingRetries};
use crate::handlers::Ctx;
use crate::ports::{JobRunner, Queue, Source, SourceError};
use std::sync::Arc;

impl Ctx {
    /// Wires the AWS adapters from the config; the ports of a section it lacks refuse every call.
    pub fn aws(config: Config, clients: &AwsClients) -> Self {
        let jobs: Arc<dyn JobRunner> = match &config.jobs {
            Some(j) => Arc::new(BatchJobRunner::new(
                clients.batch.clone(),
                &j.job_queue,
                &j.job_definition,
            )),
            None => Arc::new(UnsetJobRunner),
        };
        let sqs = |url: Option<&str>, var: &'static str| -> Arc<dyn Queue> {
            match url {
                Some(url) => Arc::new(SqsQueue::new(clients.sqs.clone(), url)),
                None => Arc::new(UnsetQueue { var }),
            }
        };
        let queues = config.queues.as_ref();
        Self {
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
            config,
        }
    }

    /// A context on the in-memory twins of every port (tests, the local runtime).
    pub fn in_memory(config: Config) -> Self {
        use crate::adapters::memory::{MemoryJobRunner, MemoryQueue, MemoryStore};
        let (retry, dlq) = config.queue_names();
        Self {
            store: Arc::new(MemoryStore::new()),
            jobs: Arc::new(MemoryJobRunner::default()),
            retry_queue: Arc::new(MemoryQueue::new(&retry)),
            failure_dlq: Arc::new(MemoryQueue::new(&dlq)),
            config,
        }
    }

    /// What Lambda function `f` does at init: the sections it reads from the environment, AWS
    /// clients, adapters.
    pub async fn from_env(f: Function) -> Result<Self, crate::config::ConfigError> {
        let config = Config::for_function_from_env(f)?;
        Ok(Self::aws(config, &AwsClients::from_env().await))
    }

    /// What a command reads: the layout plus `sections`, from the environment.
    pub async fn for_sections_from_env(
        sections: &[Section],
    ) -> Result<Self, crate::config::ConfigError> {
        let config = Config::for_sections(sections, |k| std::env::var(k).ok())?;
        Ok(Self::aws(config, &AwsClients::from_env().await))
    }

    /// The same context with every port's calls passing through `tap`.
    pub fn tapped(&self, tap: Arc<dyn crate::adapters::tap::Tap>) -> Self {
        use crate::adapters::tap::{TappedJobs, TappedQueue, TappedStore};
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
            config: self.config.clone(),
        }
    }

    /// The same context with its calls counted into `counts`.
    pub fn counted(&self, counts: &Arc<crate::adapters::tap::counting::RequestCounts>) -> Self {
        self.tapped(counts.clone())
    }

    /// The same context with every external call passing through `faults` (crash-point harness,
    /// `granary-local chaos`).
    pub fn with_faults(&self, faults: &Arc<crate::adapters::tap::faults::Faults>) -> Self {
        self.tapped(faults.clone())
    }
}

impl IngestCtx {
    /// The ingest queue on AWS: the bucket's layout and the Jobs section from the environment,
    /// `GRANARY_INGEST_*` settings, depositors' servers over HTTP(S), events on
    /// `GRANARY_NOTIFICATION_BUS`.
    pub async fn from_env(f: Function) -> Result<Self, InitError> {
        Self::for_sections_from_env(f.sections()).await
    }

    /// Only `sections` read (an operator command that needs less than a function).
    pub async fn for_sections_from_env(sections: &[Section]) -> Result<Self, InitError> {
        let config = Config::for_sections(sections, |k| std::env::var(k).ok())?;
        Self::aws(&config, &AwsClients::from_env().await)
    }

    pub fn aws(config: &Config, clients: &AwsClients) -> Result<Self, InitError> {
        let settings = config.ingest.clone();
        let ctx = Ctx::aws(config.clone(), clients);
        let remote = Arc::new(HttpRemote::new(settings.timeout)?);
        let bus = Arc::new(EventBridgeBus::new(
            clients.events.clone(),
            settings.bus_name.clone(),
        ));
        Ok(Self::new(
            &config.layout.bucket,
            ctx.store,
            ctx.jobs,
            remote,
            bus,
            ProcessingRetries {
                failure_dlq: ctx.failure_dlq,
                max_attempts: config.max_attempt(),
            },
            settings,
        )
        .with_archive_prefix(&config.archive.prefix)
        .with_claim_lease(config.leases.claim_lease))
    }
}

impl crate::handlers::archive::ArchiveCtx {
    /// Archive jobs on AWS: granary's bucket, other buckets over S3 (sources, destinations in
    /// their storage classes), the task queue, the notification bus, and the signing key read
    /// once from SSM (when `GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER` names it).
    pub async fn from_env(f: Function) -> Result<Self, InitError> {
        let config = Config::for_sections(f.sections(), |k| std::env::var(k).ok())?;
        Self::aws(&config, &AwsClients::from_env().await).await
    }

    pub async fn aws(config: &Config, clients: &AwsClients) -> Result<Self, InitError> {
        let settings = config.archive.clone();
        let task_queue: Arc<dyn Queue> = match &settings.task_queue_url {
            Some(url) => Arc::new(SqsQueue::new(clients.sqs.clone(), url)),
            None => Arc::new(UnsetQueue {
                var: "GRANARY_ARCHIVE_TASK_QUEUE_URL",
            }),
        };
        let signing_key = match &settings.signing_key_parameter {
            Some(name) => {
                let seed = crate::adapters::aws::load_signing_seed(&clients.ssm, name)
                    .await
                    .map_err(InitError::SigningKey)?;
                let key = crate::domain::archive::manifest::signing_key(&seed)
                    .map_err(|e| InitError::SigningKey(format!("SSM parameter {name}: {e}")))?;
                Some(Arc::new(key))
            }
            None => None,
        };
        Ok(Self::new(
            Arc::new(S3Store::new(clients.s3.clone(), &config.layout.bucket)),
            Arc::new(crate::adapters::aws::S3Buckets::new(clients.s3.clone())),
            task_queue,
            Arc::new(EventBridgeBus::new(
                clients.events.clone(),
                settings.bus_name.clone(),
            )),
            signing_key,
            settings,
        ))
    }
}

/// One bucket as an object store (`granary items`, which may name its bucket on the command line).
pub fn s3_store(clients: &AwsClients, bucket: &str) -> Arc<dyn crate::ports::ObjectStore> {
    Arc::new(S3Store::new(clients.s3.clone(), bucket))
}

/// One SQS queue by URL (the operator's redrive commands, which need no bucket).
pub fn sqs_queue(clients: &AwsClients, url: &str) -> Arc<dyn Queue> {
    Arc::new(SqsQueue::new(clients.sqs.clone(), url))
}

impl Importer {
    /// Wires the AWS adapters from the config (the source from `GRANARY_SOURCE_URL`).
    pub fn aws(ctx: Ctx, clients: &AwsClients) -> Result<Self, SourceError> {
        let cfg = &ctx.config.importer;
        let source: Option<Arc<dyn Source>> = match cfg.source_url.as_deref() {
            None => None,
            Some(url) if url.starts_with("s3://") => {
                Some(Arc::new(S3PrefixSource::from_url(clients.s3.clone(), url)?))
            }
            Some(url) => Some(Arc::new(HttpIndexSource::new(
                url,
                timeout(&ctx),
                cfg.discover_concurrency,
            )?)),
        };
        let import_queue: Option<Arc<dyn Queue>> = cfg
            .import_queue_url
            .as_deref()
            .map(|u| Arc::new(SqsQueue::new(clients.sqs.clone(), u)) as Arc<dyn Queue>);
        let prerequisites = Arc::new(ObjectsExist {
            templates: cfg.prerequisites.clone(),
        });
        Ok(Self {
            ctx,
            source,
            import_queue,
            prerequisites,
        })
    }

    /// What importer function `f` does at init.
    pub async fn from_env(f: Function) -> Result<Self, InitError> {
        let config = Config::for_function_from_env(f)?;
        let clients = AwsClients::from_env().await;
        Ok(Self::aws(Ctx::aws(config, &clients), &clients)?)
    }

    /// The same importer with every call (its import queue's and its source's included) passing
    /// through `tap`.
    pub fn tapped(&self, tap: Arc<dyn crate::adapters::tap::Tap>) -> Self {
        use crate::adapters::tap::{TappedQueue, TappedSource};
        Self {
            ctx: self.ctx.tapped(tap.clone()),
            import_queue: self.import_queue.as_ref().map(|q| {
                Arc::new(TappedQueue {
                    inner: q.clone(),
                    tap: tap.clone(),
                }) as Arc<dyn Queue>
            }),
            source: self.source.as_ref().map(|s| {
                Arc::new(TappedSource {
                    inner: s.clone(),
                    tap: tap.clone(),
                    url: (self.ctx.config.importer.source_url.clone())
                        .unwrap_or_else(|| "(unnamed source)".to_owned()),
                }) as Arc<dyn Source>
            }),
            prerequisites: self.prerequisites.clone(),
        }
    }

    /// The same importer with its calls passing through `faults` (the crash-point harness and
    /// `granary-local chaos`; the faults tap leaves the source alone).
    pub fn with_faults(&self, faults: &Arc<crate::adapters::tap::faults::Faults>) -> Self {
        self.tapped(faults.clone())
    }
}

/// What can stop an importer Lambda at init.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("the archive signing key: {0}")]
    SigningKey(String),
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

//! AWS adapters for every port (aws-sdk-*). Endpoint-agnostic: `AWS_ENDPOINT_URL` points the
//! whole SDK at an emulator, and S3 then uses path-style addressing.

pub mod batch;
mod buckets;
mod eventbridge;
mod s3;
mod s3_source;
mod sqs;

pub use batch::BatchJobRunner;
pub use buckets::{
    load_secure_parameter, load_signing_seed, store_signing_seed, S3Buckets, SsmParameterError,
};
pub use eventbridge::EventBridgeBus;
pub use s3::S3Store;
pub use s3_source::S3PrefixSource;
pub use sqs::SqsQueue;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls;
use std::time::Duration;

/// granary's SDK retry policy, chosen on purpose (AWS SDK for Rust developer guide, "Configuring
/// retries"; SDKs and Tools reference guide, "Retry behavior"):
///
/// - **Standard mode, 4 attempts** (the SDK default is 3) for every operation but SubmitJob. The
///   standard mode retries throttling errors (S3 503 SlowDown, SQS/Batch throttling), transient
///   5xx and I/O/timeouts, with exponential backoff and full jitter, and never retries a 4xx such
///   as a failed `If-Match`. Every other call granary makes is safe to repeat: S3 puts are
///   conditional or idempotent, SQS sends are at-least-once by design (claims and logs absorb a
///   duplicate), reads are reads.
/// - **Backoff from 200 ms up to 5 s**: a Lambda has minutes, not hours; a handler that still fails
///   hands the work back to SQS (visibility timeout) or to the next schedule tick.
/// - **SubmitJob: 1 attempt** ([`submit_job_retry_config`]): it has no idempotency token, so a
///   retry after a lost answer may start a second job. granary keeps the claim's lease instead and
///   looks the job up by its deterministic name before anything is submitted again.
/// - **Connect timeout 3 s**: a connection that cannot be made was never a request.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(SDK_MAX_ATTEMPTS)
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(Duration::from_secs(5))
}

/// Attempts per SDK call (first try included) under [`retry_config`].
pub const SDK_MAX_ATTEMPTS: u32 = 4;

/// SubmitJob is sent once: see [`retry_config`].
pub fn submit_job_retry_config() -> RetryConfig {
    RetryConfig::disabled()
}

fn timeout_config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .build()
}

/// Whether a failed SDK call may have taken effect: yes when the request may have reached the
/// service and the answer was lost (timeouts, dropped connections, unreadable responses, 5xx); no
/// when it was never sent or the service refused it (4xx, throttling included).
pub fn may_have_taken_effect<E>(
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> bool {
    use aws_sdk_s3::error::SdkError;
    match e {
        SdkError::ConstructionFailure(_) => false,
        SdkError::DispatchFailure(d) => !d.is_user(),
        SdkError::ServiceError(se) => se.raw().status().is_server_error(),
        _ => true,
    }
}

/// Loads region, credentials and endpoint the standard way, with a rustls/ring HTTPS client (no
/// aws-lc C build).
pub async fn load_sdk_config() -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .retry_config(retry_config())
        .timeout_config(timeout_config())
        .load()
        .await
}

/// The SDK config for an explicit endpoint (an emulator): region and credentials fall back to
/// `us-east-1` and dummy keys when the environment has none, since emulators accept any.
pub async fn load_sdk_config_for(endpoint: &str) -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .retry_config(retry_config())
        .timeout_config(timeout_config())
        .endpoint_url(endpoint);
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        loader = loader.region(aws_config::Region::new("us-east-1"));
    }
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        loader = loader.credentials_provider(aws_sdk_s3::config::Credentials::new(
            "testing", "testing", None, None, "emulator",
        ));
    }
    loader.load().await
}

/// One client per service, built once per process (Lambda init) and shared.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub batch: aws_sdk_batch::Client,
    pub events: aws_sdk_eventbridge::Client,
    pub ssm: aws_sdk_ssm::Client,
}

impl AwsClients {
    pub fn new(config: &SdkConfig) -> Self {
        // Emulators serve buckets by path; virtual-host names like bucket.localhost don't resolve.
        let path_style = config.endpoint_url().is_some()
            || std::env::var_os("AWS_ENDPOINT_URL").is_some()
            || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
        let s3_config = aws_sdk_s3::config::Builder::from(config)
            .force_path_style(path_style)
            .build();
        Self {
            s3: aws_sdk_s3::Client::from_conf(s3_config),
            sqs: aws_sdk_sqs::Client::new(config),
            batch: aws_sdk_batch::Client::new(config),
            events: aws_sdk_eventbridge::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
        }
    }

    pub async fn from_env() -> Self {
        Self::new(&load_sdk_config().await)
    }
}

/// The service's own error message and code, for errors operators read.
fn describe<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> String
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_s3::error::DisplayErrorContext;
    match e.as_service_error() {
        Some(se) => format!(
            "{}: {}",
            se.code().unwrap_or("error"),
            se.message().unwrap_or("no message")
        ),
        None => DisplayErrorContext(e).to_string(),
    }
}

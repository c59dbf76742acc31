//! AWS adapters for every port (aws-sdk-*). Endpoint-agnostic: `AWS_ENDPOINT_URL` points the
//! whole SDK at an emulator, and S3 then uses path-style addressing.

mod batch;
mod eventbridge;
mod s3;
mod s3_source;
mod sqs;

pub use batch::BatchJobRunner;
pub use eventbridge::EventBridgeBus;
pub use s3::S3Store;
pub use s3_source::S3PrefixSource;
pub use sqs::SqsQueue;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls;

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

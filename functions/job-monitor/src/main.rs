//! Lambda: job monitor. Consumes the Batch-events buffer queue (SQS, ReportBatchItemFailures).

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use granary::adapters::aws::AwsClients;
use granary::config::Config;
use granary::handlers::{monitor, Ctx};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::telemetry::init_lambda_tracing();
    let config = Config::from_env()?;
    let ctx = Ctx::aws(config, &AwsClients::from_env().await);
    let ctx = &ctx;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(monitor::handle_sqs(ctx, event.payload).await)
    }))
    .await
}

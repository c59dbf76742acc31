//! Lambda: importer-step. Consumes the import queue (SQS, ReportBatchItemFailures): downloads,
//! admits and re-validates items, each as far as it can go now.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use granary::config::Function;
use granary::handlers::importer;
use granary::handlers::Ctx;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::ImporterStep).await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(
            granary::wiring::metered(ctx, importer::handle_sqs(ctx, event.payload)).await,
        )
    }))
    .await
}

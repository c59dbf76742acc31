//! Lambda: ingest-submit. Consumes the submissions queue (SQS, ReportBatchItemFailures): each
//! message a submission, sent directly or forwarded from the notification bus.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use granary::config::Function;
use granary::handlers::ingest;
use granary::handlers::Ctx;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::IngestSubmit).await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(
            granary::wiring::metered(
                ctx,
                ingest::handle_submissions(ctx, event.payload, chrono::Utc::now()),
            )
            .await,
        )
    }))
    .await
}

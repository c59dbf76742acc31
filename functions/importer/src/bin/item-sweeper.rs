//! Lambda: item-sweeper. Invoked by an EventBridge schedule; recovers items stuck in DOWNLOADING
//! or PROCESSING past their timeout.

use granary::handlers::importer::{sweeper, Importer};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::telemetry::init_lambda_tracing();
    let imp = &Importer::from_env().await?;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            sweeper::sweep(imp, chrono::Utc::now())
                .await
                .map_err(lambda_runtime::Error::from)
        },
    ))
    .await
}

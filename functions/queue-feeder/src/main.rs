//! Lambda: queue feeder. Invoked by the EventBridge schedule with {"granule_submit_count": N}.

use granary::adapters::aws::AwsClients;
use granary::config::Config;
use granary::handlers::{feeder, Ctx};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::telemetry::init_lambda_tracing();
    let config = Config::from_env()?;
    let ctx = Ctx::aws(config, &AwsClients::from_env().await);
    let ctx = &ctx;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<feeder::FeederEvent>| async move {
            feeder::run(ctx, event.payload)
                .await
                .map_err(lambda_runtime::Error::from)
        },
    ))
    .await
}

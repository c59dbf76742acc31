//! The crash-point harness: every handler is stopped at each of its external calls in turn — the
//! call never made, or made and its answer lost — and the platform then does what AWS does after
//! a dead invocation (the SQS message comes back once its visibility timeout passes, the schedule
//! fires again, an operator reruns an interrupted command) until nothing moves any more. After
//! each run the promise is audited: no item stranded, no (granule, attempt) submitted twice, every
//! failure that ends an item dead-lettered with a reason, every success logged.
//!
//! Everything runs on the in-memory twins; the handlers are the production ones, and each
//! invocation's S3, SQS and Batch calls pass through one `Faults` (see `adapters::tap::faults`).

//! The platform the handler tests run on: the in-memory twins of S3, SQS and Batch, the
//! production handlers, and what AWS does around them (schedules fire, event sources deliver,
//! visibility timeouts run out, Batch runs jobs and EventBridge delivers their ends). Each Lambda
//! runs with the environment `infra/template.yaml` gives that function, resolved for a test
//! stack, and its calls are recorded in that function's [`AccessLog`] (IAM by use).
#![allow(dead_code)]

pub mod crashes;
pub mod ingest;
pub mod leases;
pub mod spread;

use chrono::Utc;
use granary::adapters::memory::{
    job_state_change, Ending, MemoryJobRunner, MemoryQueue, MemorySource, MemoryStore,
};
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use granary::adapters::tap::access_log::{AccessLog, AwsAccount};
use granary::adapters::tap::faults::{CrashPoint, FaultCounts, Faults, Interleave};
use granary::adapters::tap::{Call, Fate, Op, Refusal, Tap};
use granary::config::Config;
use granary::domain::batch_event::JobStatus;
use granary::domain::brake::BrakeSettings;
use granary::domain::campaign::Campaign;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::item::{Change, ItemQuery, NewItem};
use granary::domain::lifecycle::ItemState;
use granary::handlers::importer::{self, discover, sweeper, ObjectsExist};
use granary::handlers::redrive::{self, RedriveFilter, RedriveOptions};
use granary::handlers::{feeder, item_sync, monitor, reconciler, requeuer, resume, Ctx};
use granary::ports::{PutCondition, Queue, SourceFile};
use granary_template::{Resolved, Stack, Template};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

mod act;
#[allow(unused_imports)]
pub use act::{act, run, run_in, run_with};
use act::{poison, LoseSubmitAnswer, RefuseItemRecords, RefuseSubmitJob};

mod prepare;
#[allow(unused_imports)]
pub use prepare::prepare;

mod settle;
use settle::{let_leases_run_out, operator_cancels, run_to_the_retry_of};
#[allow(unused_imports)]
pub use settle::{only_item, settle, settle_with, Recovered, Recovery};

mod deliver;
#[allow(unused_imports)]
pub use deliver::{ctx, drain, drain_counted, finish_jobs};

mod world;
#[allow(unused_imports)]
pub use world::{
    account, check_function_role, function_config, stack, world, world_in, World, EZID_CREDENTIALS,
};

mod scenarios;
#[allow(unused_imports)]
pub use scenarios::{Scenario, ALL, SECOND_CAMPAIGN};

pub const BACKFILL: [&str; 2] = [
    "HLS.S30.T18TYN.2022002T153012.v2.0",
    "HLS.L30.T18TYN.2022001T153012.v2.0",
];

/// Where the importer's files come from in the test stack: an S3 prefix outside granary's bucket,
/// so the template's source grants are exercised.
pub const SOURCE_URL: &str = "s3://granary-test-source/incoming/";

/// The bucket-name patterns the test stack lets archive jobs read from and store to.
pub const ARCHIVE_SOURCES: &str = "granary-test-products-*";
pub const ARCHIVE_DESTINATIONS: &str = "granary-test-vault-*";

/// The inventories of [`Scenario::FeederTwoInventories`]: the second lists a granule of the
/// first again (submitted once) and one of its own.
pub const TWO_INVENTORIES: [[&str; 2]; 2] = [
    BACKFILL,
    [BACKFILL[1], "HLS.S30.T18TYN.2022003T153012.v2.0"],
];

/// A Spot reclaim as Batch reports it.
pub const SPOT: &str = granary::adapters::memory::SPOT_RECLAIM;

/// An inventory row no granule id can be made of.
pub const POISON_ROW: &str = "HLS.S30.T18TYN/../2022003T153012";

/// The stack's Lambda functions, by their logical ids in the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Function {
    Feeder,
    Monitor,
    Requeuer,
    Discover,
    ImportStep,
    Sweeper,
}

impl Function {
    pub const ALL: [Function; 6] = [
        Function::Feeder,
        Function::Monitor,
        Function::Requeuer,
        Function::Discover,
        Function::ImportStep,
        Function::Sweeper,
    ];

    pub fn logical_id(self) -> &'static str {
        match self {
            Function::Feeder => "QueueFeederFunction",
            Function::Monitor => "JobMonitorFunction",
            Function::Requeuer => "RequeuerFunction",
            Function::Discover => "ImporterDiscoverFunction",
            Function::ImportStep => "ImporterStepFunction",
            Function::Sweeper => "ItemSweeperFunction",
        }
    }

    /// The deployed function this one plays, for the configuration sections it reads.
    pub fn deployed(self) -> granary::config::Function {
        use granary::config::Function as F;
        match self {
            Function::Feeder => F::QueueFeeder,
            Function::Monitor => F::JobMonitor,
            Function::Requeuer => F::Requeuer,
            Function::Discover => F::ImporterDiscover,
            Function::ImportStep => F::ImporterStep,
            Function::Sweeper => F::ItemSweeper,
        }
    }
}

//! What a campaign costs, from what its logs already hold: each attempt's Batch job detail gives
//! the resources it reserved (`container.resourceRequirements` VCPU and MEMORY, or the older
//! `container.vcpus` / `container.memory`) and how long it ran (each of `attempts[]`, from
//! `startedAt` to `stoppedAt`: Batch's own retries of a job are in that array, so a Spot reclaim
//! Batch absorbed is paid for too). Compute is priced per vCPU-hour and GiB-hour reserved, the
//! way AWS Fargate bills and the usual way to share out an EC2 instance; granary's own requests
//! are priced from the figures measured per granule (BENCHMARKS.md).

use serde::Serialize;

/// The resources one Batch job reserved and how long its attempts ran, in whole units (so the
/// facts that carry it stay comparable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub milli_vcpus: u64,
    pub memory_mib: u64,
    pub run_ms: u64,
}

/// The usage a job detail (as an event or DescribeJobs gives it) records; `None` when it names
/// no resources or no attempt with both a start and a stop (a job that never started costs no
/// compute).
pub fn usage_of(detail: &serde_json::Value) -> Option<Usage> {
    let container = &detail["container"];
    let requirement = |kind: &str| -> Option<f64> {
        container["resourceRequirements"]
            .as_array()?
            .iter()
            .find(|r| r["type"].as_str() == Some(kind))
            .and_then(|r| r["value"].as_str())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let vcpus = requirement("VCPU").or_else(|| container["vcpus"].as_f64())?;
    let memory = requirement("MEMORY").or_else(|| container["memory"].as_f64())?;
    let span = |a: &serde_json::Value| -> Option<u64> {
        let (start, stop) = (a["startedAt"].as_u64()?, a["stoppedAt"].as_u64()?);
        (start > 0 && stop >= start).then_some(stop - start)
    };
    // Each attempt Batch made, or (a detail without the field) the job's own start and stop. An
    // empty `attempts` means none ran: an array child answered from its parent's description
    // carries the parent's times and no attempts, and must not be charged the array's span.
    let spans: Vec<u64> = match detail["attempts"].as_array() {
        Some(attempts) => attempts.iter().filter_map(span).collect(),
        None => span(detail).into_iter().collect(),
    };
    if spans.is_empty() {
        return None;
    }
    let run_ms = spans.iter().sum();
    Some(Usage {
        milli_vcpus: (vcpus * 1000.0).round() as u64,
        memory_mib: memory.round() as u64,
        run_ms,
    })
}

/// Compute prices: per vCPU-hour and per GiB-hour reserved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ComputePrices {
    pub vcpu_hour: f64,
    pub gib_hour: f64,
}

/// AWS Fargate, Linux/x86, us-east-1, on demand (the AWS Fargate pricing page as listed in
/// November 2026): $0.04048 a vCPU-hour and $0.004445 a GB-hour.
pub const FARGATE_ON_DEMAND: ComputePrices = ComputePrices {
    vcpu_hour: 0.040_48,
    gib_hour: 0.004_445,
};

/// What `--capacity spot` takes off when no discount is given: AWS advertises Fargate Spot at
/// up to 70% off on demand (EC2 Spot at up to 90%). An "up to", and the market moves it: give
/// the prices on your bill (`--vcpu-hour-price`, `--gib-hour-price`) for a figure to rely on.
pub const SPOT_DISCOUNT: f64 = 0.70;

impl ComputePrices {
    /// These prices with Spot's discount taken off.
    pub fn spot(self, discount: f64) -> Self {
        Self {
            vcpu_hour: self.vcpu_hour * (1.0 - discount),
            gib_hour: self.gib_hour * (1.0 - discount),
        }
    }
}

/// The request list prices granary's own cost is counted at (us-east-1, November 2026; AWS
/// pricing pages of S3 Standard, SQS standard queues and Lambda arm64): one table, read by
/// `granary-bench campaign` and by the constants below.
pub mod prices {
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// arm64, per GB-second.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
    /// The functions' memory, GB.
    pub const LAMBDA_MEMORY_GB: f64 = 0.25;
    /// PUT, COPY, POST, LIST per request.
    pub const S3_PUT: f64 = 0.005 / 1e3;
    pub const S3_GET: f64 = 0.0004 / 1e3;
    pub const SQS_REQUEST: f64 = 0.40 / 1e6;
    /// GETs that cost what one LIST (priced as a PUT) does, whole: 12. A look that could be
    /// one LIST or a GET a key uses it to choose.
    pub const GETS_A_LIST_IS_WORTH: usize = (S3_PUT / S3_GET) as usize;
}

/// granary's own cost a granule, by service, at the list prices of `granary-bench campaign`
/// (us-east-1, November 2026): measured on a million-granule array campaign with item records
/// on (BENCHMARKS.md, "The cost floor met"; 2026-11-28, ff055c7): S3 2.19 PUT/LIST and
/// 1.28 GET, SQS 1.18 requests, Lambda 0.105 invocations and their run time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OwnCostPerGranule {
    pub s3: f64,
    pub sqs: f64,
    pub lambda: f64,
}

pub const OWN_COST_RECORDS_ON: OwnCostPerGranule = OwnCostPerGranule {
    s3: 2.186 * prices::S3_PUT + 1.283 * prices::S3_GET,
    sqs: 1.182 * prices::SQS_REQUEST,
    lambda: 0.105 * prices::LAMBDA_REQUEST + 1.12e-4 * prices::LAMBDA_GB_SECOND,
};

/// With item records off (BENCHMARKS.md: 1.10 PUT and 1.03 GET a granule).
pub const OWN_COST_RECORDS_OFF: OwnCostPerGranule = OwnCostPerGranule {
    s3: 1.14 * prices::S3_PUT + 1.03 * prices::S3_GET,
    sqs: 1.183 * prices::SQS_REQUEST,
    lambda: 0.106 * prices::LAMBDA_REQUEST + 7.1e-5 * prices::LAMBDA_GB_SECOND,
};

/// A campaign's cost, in all and per ended granule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignCost {
    /// Granules with a latest outcome (succeeded or failed).
    pub granules: u64,
    /// Batch jobs (logs) in all, and those whose detail gave no usage (not priced).
    pub jobs: u64,
    pub jobs_without_usage: u64,
    pub vcpu_hours: f64,
    pub gib_hours: f64,
    pub prices: ComputePrices,
    pub compute_dollars: f64,
    /// Of the compute, what the attempts that did not end the granule's story cost (retried
    /// failures, Spot reclaims): the price of what the cloud and the code broke.
    pub retried_compute_dollars: f64,
    pub s3_dollars: f64,
    pub sqs_dollars: f64,
    pub lambda_dollars: f64,
    pub total_dollars: f64,
    pub dollars_per_granule: f64,
}

/// One job's part: its usage and whether it was the granule's latest attempt.
pub struct JobUsage {
    pub usage: Option<Usage>,
    pub latest: bool,
}

/// Prices every job and adds granary's own requests for `granules` granules.
pub fn campaign_cost(
    jobs: &[JobUsage],
    granules: u64,
    prices: ComputePrices,
    own: OwnCostPerGranule,
) -> CampaignCost {
    let mut vcpu_hours = 0.0;
    let mut gib_hours = 0.0;
    let mut retried = 0.0;
    let mut without = 0;
    for job in jobs {
        let Some(u) = job.usage else {
            without += 1;
            continue;
        };
        let hours = u.run_ms as f64 / 3_600_000.0;
        let (v, g) = (
            u.milli_vcpus as f64 / 1000.0 * hours,
            u.memory_mib as f64 / 1024.0 * hours,
        );
        vcpu_hours += v;
        gib_hours += g;
        if !job.latest {
            retried += v * prices.vcpu_hour + g * prices.gib_hour;
        }
    }
    let compute = vcpu_hours * prices.vcpu_hour + gib_hours * prices.gib_hour;
    let n = granules as f64;
    let (s3, sqs, lambda) = (own.s3 * n, own.sqs * n, own.lambda * n);
    let total = compute + s3 + sqs + lambda;
    CampaignCost {
        granules,
        jobs: jobs.len() as u64,
        jobs_without_usage: without,
        vcpu_hours,
        gib_hours,
        prices,
        compute_dollars: compute,
        retried_compute_dollars: retried,
        s3_dollars: s3,
        sqs_dollars: sqs,
        lambda_dollars: lambda,
        total_dollars: total,
        dollars_per_granule: if granules == 0 { 0.0 } else { total / n },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_reads_resource_requirements_and_sums_every_attempt_batch_made() {
        let detail = json!({
            "container": {"resourceRequirements": [
                {"type": "VCPU", "value": "0.5"}, {"type": "MEMORY", "value": "2048"}]},
            "startedAt": 1_000, "stoppedAt": 900_000,
            "attempts": [
                {"startedAt": 1_000, "stoppedAt": 61_000},
                {"startedAt": 70_000, "stoppedAt": 3_670_000}
            ]
        });
        assert_eq!(
            usage_of(&detail),
            Some(Usage {
                milli_vcpus: 500,
                memory_mib: 2048,
                run_ms: 3_660_000
            })
        );
    }

    #[test]
    fn usage_falls_back_to_vcpus_and_memory_and_the_jobs_own_times() {
        let detail = json!({"container": {"vcpus": 2, "memory": 20000},
            "startedAt": 10, "stoppedAt": 1_010});
        assert_eq!(
            usage_of(&detail),
            Some(Usage {
                milli_vcpus: 2000,
                memory_mib: 20000,
                run_ms: 1_000
            })
        );
        // Never started (a job that failed to pull its image): no compute.
        let never = json!({"container": {"vcpus": 1, "memory": 128}, "stoppedAt": 5});
        assert_eq!(usage_of(&never), None);
        // An array child described from its parent: the parent's times, no attempts of its own.
        let from_parent = json!({"container": {"vcpus": 1, "memory": 128},
            "startedAt": 10, "stoppedAt": 3_600_010, "attempts": []});
        assert_eq!(usage_of(&from_parent), None);
        assert_eq!(usage_of(&json!({"startedAt": 1, "stoppedAt": 2})), None);
    }

    #[test]
    fn the_published_events_give_their_usage() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/real-batch-events");
        let read = |name: &str| -> serde_json::Value {
            let raw = std::fs::read_to_string(dir.join(name)).unwrap();
            let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
            if v.get("detail").is_some() {
                v["detail"].clone()
            } else {
                v
            }
        };
        // Fargate, 0.5 vCPU and 2 GiB, one attempt of 32.129 s.
        assert_eq!(
            usage_of(&read("09-fargate-exit1-failed.json")),
            Some(Usage {
                milli_vcpus: 500,
                memory_mib: 2048,
                run_ms: 32_129
            })
        );
        // Three attempts on Spot, the host reclaimed twice: every attempt's run time counts.
        let spot = usage_of(&read(
            "17-hlsvi-spot-host-terminated-3-attempts.jobdetail.json",
        ))
        .unwrap();
        assert_eq!((spot.milli_vcpus, spot.memory_mib), (2000, 20000));
        assert_eq!(spot.run_ms, 270_826 + 100 + 1_000);
    }

    #[test]
    fn a_campaign_prices_compute_by_reservation_and_adds_its_own_requests() {
        let hour = |vcpu: u64, mib: u64| {
            Some(Usage {
                milli_vcpus: vcpu * 1000,
                memory_mib: mib,
                run_ms: 3_600_000,
            })
        };
        let jobs = [
            JobUsage {
                usage: hour(2, 4096),
                latest: true,
            },
            JobUsage {
                usage: hour(1, 1024),
                latest: false,
            },
            JobUsage {
                usage: None,
                latest: true,
            },
        ];
        let prices = ComputePrices {
            vcpu_hour: 0.04,
            gib_hour: 0.004,
        };
        let own = OwnCostPerGranule {
            s3: 0.001,
            sqs: 0.0,
            lambda: 0.0,
        };
        let c = campaign_cost(&jobs, 2, prices, own);
        assert_eq!((c.jobs, c.jobs_without_usage), (3, 1));
        assert!((c.vcpu_hours - 3.0).abs() < 1e-9 && (c.gib_hours - 5.0).abs() < 1e-9);
        assert!((c.compute_dollars - (3.0 * 0.04 + 5.0 * 0.004)).abs() < 1e-12);
        assert!((c.retried_compute_dollars - (0.04 + 0.004)).abs() < 1e-12);
        assert!((c.total_dollars - (c.compute_dollars + 0.002)).abs() < 1e-12);
        assert!((c.dollars_per_granule - c.total_dollars / 2.0).abs() < 1e-12);
        let spot = prices.spot(0.7);
        assert!((spot.vcpu_hour - 0.012).abs() < 1e-12);
    }
}

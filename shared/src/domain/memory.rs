//! Memory-aware retries. A job Batch stops for using more memory than it reserved ends with the
//! container reason ECS gives such a task, "OutOfMemoryError: Container killed due to memory
//! usage" (Amazon ECS developer guide, "Troubleshooting Amazon ECS OutOfMemoryError errors",
//! https://docs.aws.amazon.com/AmazonECS/latest/developerguide/out-of-memory.html; AWS re:Post,
//! https://repost.aws/knowledge-center/ecs-resolve-outofmemory-errors). `domain::classify` makes
//! it a failure class of its own, retried. Its retry asks for twice the memory, through
//! SubmitJob's `containerOverrides.resourceRequirements` (AWS Batch user guide, "Override
//! resource requirements", https://docs.aws.amazon.com/batch/latest/userguide/override-resource-requirements.html),
//! up to the cap of `GRANARY_JOB_MEMORY_MIB`; a job that ran out at the cap is dead-lettered
//! with the memory it had. The memory a retry asks for is also its `memory_mib` job parameter,
//! so its end says what it had whatever the detail shows, and the attempts after it (a Spot
//! reclaim's retry) keep it.

/// A job's memory as granary set it: a parameter, read back by the monitor.
pub const MEMORY_PARAM: &str = "memory_mib";

/// What the job definition reserves, and the most an out-of-memory retry may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    pub base_mib: u32,
    pub cap_mib: u32,
}

/// A memory setting that is not `BASE` or `BASE:CAP`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a whole number of MiB; use BASE or BASE:CAP, e.g. 2048:16384")]
pub struct BadMemory(pub String);

impl MemoryLimits {
    /// `BASE` or `BASE:CAP`, in MiB; a cap below the base is the base (no raise).
    pub fn parse(raw: &str) -> Result<Self, BadMemory> {
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| BadMemory(s.to_owned()))
        };
        let (base, cap) = match raw.split_once(':') {
            Some((b, c)) => (number(b)?, number(c)?),
            None => {
                let b = number(raw)?;
                (b, b)
            }
        };
        Ok(Self {
            base_mib: base,
            cap_mib: cap.max(base),
        })
    }
}

/// The memory the next attempt goes out with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryStep {
    /// As the ended attempt had it (`None`: the job definition's).
    Keep(Option<u32>),
    /// Raised after an out-of-memory end.
    Raise(u32),
    /// Out of memory at the cap: dead-lettered with the memory it had.
    CapSpent { had: u32 },
}

/// The decision: an out-of-memory end doubles the memory the attempt had (the job definition's
/// when granary set none), up to the cap; at the cap it is spent, unless an operator redrove it
/// (their decision: it goes again at the cap). Any other end keeps the memory.
pub fn next_memory(
    had: Option<u32>,
    out_of_memory: bool,
    limits: MemoryLimits,
    redrive: bool,
) -> MemoryStep {
    if !out_of_memory {
        return MemoryStep::Keep(had);
    }
    let had = had.unwrap_or(limits.base_mib);
    if had >= limits.cap_mib && !redrive {
        return MemoryStep::CapSpent { had };
    }
    MemoryStep::Raise(had.saturating_mul(2).min(limits.cap_mib).max(had))
}

/// The memory granary set on a job (its parameter), if it set any.
pub fn memory_set(detail: &serde_json::Value) -> Option<u32> {
    detail["parameters"][MEMORY_PARAM].as_str()?.parse().ok()
}

/// The DLQ reason of an out-of-memory end at the cap (the requeuer's; the audit says the same).
pub fn cap_spent_reason(had: u32, limits: MemoryLimits) -> String {
    format!(
        "out of memory at {had} MiB, the cap (GRANARY_JOB_MEMORY_MIB {}:{})",
        limits.base_mib, limits.cap_mib
    )
}

/// The memory a job had, from its detail as an event or DescribeJobs gives it: granary's
/// parameter, else the container's MEMORY requirement, else its older `memory` field.
pub fn memory_of(detail: &serde_json::Value) -> Option<u32> {
    if let Some(mib) = memory_set(detail) {
        return Some(mib);
    }
    let container = &detail["container"];
    let from_requirements = container["resourceRequirements"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["type"] == "MEMORY")
        .and_then(|r| r["value"].as_str()?.parse::<f64>().ok());
    let mib = from_requirements.or_else(|| container["memory"].as_f64())?;
    (mib >= 1.0 && mib <= f64::from(u32::MAX)).then_some(mib as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: MemoryLimits = MemoryLimits {
        base_mib: 2048,
        cap_mib: 8192,
    };

    #[test]
    fn out_of_memory_doubles_up_to_the_cap_then_is_spent() {
        assert_eq!(
            next_memory(None, true, LIMITS, false),
            MemoryStep::Raise(4096)
        );
        assert_eq!(
            next_memory(Some(4096), true, LIMITS, false),
            MemoryStep::Raise(8192)
        );
        assert_eq!(
            next_memory(Some(6000), true, LIMITS, false),
            MemoryStep::Raise(8192)
        );
        assert_eq!(
            next_memory(Some(8192), true, LIMITS, false),
            MemoryStep::CapSpent { had: 8192 }
        );
        assert_eq!(
            next_memory(Some(8192), true, LIMITS, true),
            MemoryStep::Raise(8192)
        );
    }

    #[test]
    fn other_ends_keep_the_memory_the_attempt_had() {
        assert_eq!(
            next_memory(Some(4096), false, LIMITS, false),
            MemoryStep::Keep(Some(4096))
        );
        assert_eq!(
            next_memory(None, false, LIMITS, false),
            MemoryStep::Keep(None)
        );
    }

    #[test]
    fn limits_read_base_and_cap() {
        assert_eq!(
            MemoryLimits::parse("2048:16384"),
            Ok(MemoryLimits {
                base_mib: 2048,
                cap_mib: 16384
            })
        );
        assert_eq!(
            MemoryLimits::parse("2048"),
            Ok(MemoryLimits {
                base_mib: 2048,
                cap_mib: 2048
            })
        );
        assert_eq!(MemoryLimits::parse("4096:1024").unwrap().cap_mib, 4096);
        for bad in ["", "x", "2048:", "0:100", "-1"] {
            assert!(MemoryLimits::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn memory_is_read_from_the_parameter_then_the_container() {
        let both = json!({"parameters": {"memory_mib": "4096"},
            "container": {"resourceRequirements": [{"type": "MEMORY", "value": "2048"}]}});
        assert_eq!(memory_of(&both), Some(4096));
        let requirement = json!({"container": {"resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "3000"}]}});
        assert_eq!(memory_of(&requirement), Some(3000));
        assert_eq!(memory_of(&json!({"container": {"memory": 128}})), Some(128));
        assert_eq!(memory_of(&json!({"container": {}})), None);
    }
}

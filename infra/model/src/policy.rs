//! A resource policy (an SQS queue policy, a KMS key policy) decided for one request, as AWS
//! decides it: an explicit Deny wins, then an Allow, else the policy is silent (in the same
//! account the caller's identity policy then decides; for a KMS key, a key policy that is silent
//! denies, unless it delegates to the account's IAM by naming its root).
//!
//! Only what granary's template uses is modelled — principals by service or ARN (`*` and the
//! account's root included), actions and resources with IAM's wildcards, and the condition
//! operators below — and anything else is an error, never a silent pass. Condition semantics
//! follow the IAM User Guide, "IAM JSON policy elements: Condition operators": a key absent from
//! the request makes a condition false, except for a negated operator (`…NotEquals`,
//! `…NotLike`), for which it is true; several values of one key are OR'ed (NOR'ed when negated);
//! several keys and several operators are AND'ed ("Conditions with multiple context keys or
//! values").

use crate::wildcard;
use serde_json::Value;
use std::collections::BTreeMap;

/// Who makes the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An AWS service principal (`events.amazonaws.com`).
    Service(String),
    /// An IAM principal of an account, by its ARN (`arn:aws:iam::123456789012:role/name`).
    Iam(String),
}

/// One request: who, what, on what, and its request context (`aws:SourceArn`,
/// `aws:PrincipalArn`, `aws:SecureTransport`, `kms:ViaService`, …).
#[derive(Debug, Clone)]
pub struct Request {
    pub caller: Caller,
    pub action: String,
    pub resource: String,
    pub context: BTreeMap<String, String>,
}

impl Request {
    /// A request over TLS (`aws:SecureTransport` true), with `aws:PrincipalArn` set for an IAM
    /// caller and `aws:PrincipalIsAWSService` for every caller as AWS sets them: the latter is in
    /// every signed request, `true` only when a service principal calls directly (IAM User Guide,
    /// "AWS global condition context keys").
    pub fn new(caller: Caller, action: &str, resource: &str) -> Self {
        let mut context = BTreeMap::from([("aws:SecureTransport".to_owned(), "true".to_owned())]);
        let is_service = matches!(caller, Caller::Service(_));
        context.insert("aws:PrincipalIsAWSService".into(), is_service.to_string());
        if let Caller::Iam(arn) = &caller {
            context.insert("aws:PrincipalArn".into(), arn.clone());
        }
        Self {
            caller,
            action: action.to_owned(),
            resource: resource.to_owned(),
            context,
        }
    }

    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.context.insert(key.to_owned(), value.to_owned());
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A Deny statement applies.
    Denied,
    /// No Deny, and an Allow statement applies.
    Allowed,
    /// No statement applies.
    Silent,
}

/// What in a policy could not be read, or is not modelled here (never a silent pass).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{0} is not a list of statements")]
    NotAStatementList(Value),
    /// A statement's `Effect` is neither `Allow` nor `Deny` (or is missing).
    #[error("Effect {0:?}")]
    UnknownEffect(Option<String>),
    /// `NotPrincipal`, `NotAction` or `NotResource`.
    #[error("{0} is not modelled")]
    NegatedElement(&'static str),
    /// A `Principal` that is neither `*` nor a map of principal kinds.
    #[error("Principal {0} is not modelled")]
    UnmodelledPrincipal(Value),
    /// A principal kind other than `Service` and `AWS` (`Federated`, `CanonicalUser`).
    #[error("Principal kind {0} is not modelled")]
    UnmodelledPrincipalKind(String),
    #[error("Condition {0} is not a map")]
    ConditionNotAMap(Value),
    #[error("{operator}'s keys are not a map")]
    ConditionKeysNotAMap { operator: String },
    #[error("condition operator {0} is not modelled")]
    UnmodelledConditionOperator(String),
    #[error("{0} is neither a string nor a list")]
    NeitherStringNorList(Value),
}

/// The policy's decision on `request` (`statements`: the `Statement` list of a resolved policy
/// document).
pub fn decide(statements: &Value, request: &Request) -> Result<Decision, PolicyError> {
    let statements = statements
        .as_array()
        .ok_or_else(|| PolicyError::NotAStatementList(statements.clone()))?;
    let mut allowed = false;
    for s in statements {
        if !applies(s, request)? {
            continue;
        }
        match s["Effect"].as_str() {
            Some("Deny") => return Ok(Decision::Denied),
            Some("Allow") => allowed = true,
            other => return Err(PolicyError::UnknownEffect(other.map(str::to_owned))),
        }
    }
    Ok(if allowed {
        Decision::Allowed
    } else {
        Decision::Silent
    })
}

fn applies(s: &Value, r: &Request) -> Result<bool, PolicyError> {
    for refused in ["NotPrincipal", "NotAction", "NotResource"] {
        if !s[refused].is_null() {
            return Err(PolicyError::NegatedElement(refused));
        }
    }
    Ok(principal_matches(&s["Principal"], &r.caller)?
        && strings(&s["Action"])?
            .iter()
            .any(|a| wildcard(&a.to_ascii_lowercase(), &r.action.to_ascii_lowercase()))
        && strings(&s["Resource"])?
            .iter()
            .any(|p| wildcard(p, &r.resource))
        && conditions_hold(&s["Condition"], &r.context)?)
}

fn principal_matches(p: &Value, caller: &Caller) -> Result<bool, PolicyError> {
    if p == "*" {
        return Ok(true);
    }
    let map = p
        .as_object()
        .ok_or_else(|| PolicyError::UnmodelledPrincipal(p.clone()))?;
    for (kind, names) in map {
        let names = strings(names)?;
        let hit = match (kind.as_str(), caller) {
            ("Service", Caller::Service(s)) => names.iter().any(|n| n == s),
            ("AWS", Caller::Iam(arn)) => names.iter().any(|n| {
                n == "*" || n == arn || account_root(n).is_some_and(|a| account_of(arn) == Some(a))
            }),
            ("Service" | "AWS", _) => false,
            (other, _) => return Err(PolicyError::UnmodelledPrincipalKind(other.to_owned())),
        };
        if hit {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `arn:aws:iam::123456789012:root` → the account.
fn account_root(arn: &str) -> Option<&str> {
    let rest = arn.strip_suffix(":root")?;
    rest.rsplit(':').next()
}

fn account_of(arn: &str) -> Option<&str> {
    arn.split(':').nth(4)
}

fn conditions_hold(block: &Value, context: &BTreeMap<String, String>) -> Result<bool, PolicyError> {
    if block.is_null() {
        return Ok(true);
    }
    let block = block
        .as_object()
        .ok_or_else(|| PolicyError::ConditionNotAMap(block.clone()))?;
    for (operator, keys) in block {
        let keys = keys
            .as_object()
            .ok_or_else(|| PolicyError::ConditionKeysNotAMap {
                operator: operator.clone(),
            })?;
        for (key, values) in keys {
            let values = strings(values)?;
            let present = context.get(key);
            let holds = match operator.as_str() {
                "StringEquals" | "ArnEquals" => {
                    present.is_some_and(|v| values.iter().any(|x| x == v))
                }
                "StringLike" | "ArnLike" => {
                    present.is_some_and(|v| values.iter().any(|x| wildcard(x, v)))
                }
                "StringNotEquals" | "ArnNotEquals" => {
                    present.is_none_or(|v| values.iter().all(|x| x != v))
                }
                "StringNotLike" | "ArnNotLike" => {
                    present.is_none_or(|v| values.iter().all(|x| !wildcard(x, v)))
                }
                "Bool" => present.is_some_and(|v| values.iter().any(|x| x == v)),
                other => return Err(PolicyError::UnmodelledConditionOperator(other.to_owned())),
            };
            if !holds {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn strings(v: &Value) -> Result<Vec<String>, PolicyError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Bool(b) => Ok(vec![b.to_string()]),
        Value::Array(items) => items
            .iter()
            .map(|i| strings(i).map(|mut s| s.remove(0)))
            .collect(),
        other => Err(PolicyError::NeitherStringNorList(other.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(name: &str) -> Caller {
        Caller::Iam(format!("arn:aws:iam::123456789012:role/{name}"))
    }

    #[test]
    fn an_absent_key_fails_a_positive_operator_and_passes_a_negated_one() {
        let policy = json!([
            {"Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*",
             "Condition": {"ArnNotEquals": {"aws:SourceArn": "arn:rule"}}},
            {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
             "Action": "sqs:SendMessage", "Resource": "*",
             "Condition": {"ArnEquals": {"aws:SourceArn": "arn:rule"}}}
        ]);
        let send = |c: Caller| Request::new(c, "sqs:SendMessage", "arn:q");
        let events = || Caller::Service("events.amazonaws.com".into());
        assert_eq!(
            decide(&policy, &send(events()).with("aws:SourceArn", "arn:rule")),
            Ok(Decision::Allowed)
        );
        assert_eq!(decide(&policy, &send(events())), Ok(Decision::Denied));
        assert_eq!(decide(&policy, &send(role("x"))), Ok(Decision::Denied));
        assert_eq!(
            decide(
                &policy,
                &Request::new(role("x"), "sqs:ReceiveMessage", "arn:q")
            ),
            Ok(Decision::Silent)
        );
    }

    #[test]
    fn the_accounts_root_names_its_iam_principals_and_unknown_operators_are_errors() {
        let policy = json!([{"Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
            "Action": "kms:Describe*", "Resource": "*"}]);
        let describe = |c: Caller| Request::new(c, "kms:DescribeKey", "arn:k");
        assert_eq!(decide(&policy, &describe(role("a"))), Ok(Decision::Allowed));
        assert_eq!(
            decide(
                &policy,
                &describe(Caller::Iam("arn:aws:iam::999999999999:role/a".into()))
            ),
            Ok(Decision::Silent)
        );
        let odd = json!([{"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*",
            "Condition": {"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}}]);
        let refused = decide(&odd, &describe(role("a")));
        assert_eq!(
            refused,
            Err(PolicyError::UnmodelledConditionOperator(
                "DateLessThan".into()
            ))
        );
        assert_eq!(
            refused.map_err(|e| e.to_string()),
            Err("condition operator DateLessThan is not modelled".to_owned())
        );
        let negated = json!([{"Effect": "Allow", "NotPrincipal": "*", "Action": "*"}]);
        assert_eq!(
            decide(&negated, &describe(role("a"))).map_err(|e| e.to_string()),
            Err("NotPrincipal is not modelled".to_owned())
        );
    }
}

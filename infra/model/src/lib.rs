//! `infra/template.yaml` as data, for the tests that hold the template to what the code does.
//!
//! The template is read with its short-form intrinsics (`!Ref`, `!Sub`, …) turned into their JSON
//! form, then resolved for a [`Stack`]: parameters (given or defaulted), pseudo parameters,
//! conditions, and every resource's `Ref` and `GetAtt` answered with the name or ARN CloudFormation
//! would give it in that stack. From the resolved template come each function's environment and
//! the IAM statements of its role; [`Statement::allows`] matches an action and a resource ARN the
//! way IAM does (`*` and `?` wildcards, case-insensitive actions).
//!
//! Only what the template uses is implemented; anything else is an error naming it, never a
//! silent pass.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub mod policy;
mod resolve;
pub use resolve::Stack;

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    #[error("the template: {0}")]
    Invalid(String),
}

fn invalid(why: impl Into<String>) -> TemplateError {
    TemplateError::Invalid(why.into())
}

/// The template as written (short-form intrinsics in their long JSON form).
#[derive(Debug, Clone)]
pub struct Template {
    pub doc: Value,
}

impl Template {
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|e| TemplateError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&text)
    }

    /// The template in this repository (`infra/template.yaml`).
    pub fn granary() -> Result<Self, TemplateError> {
        Self::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml"))
    }

    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            doc: long_form(yaml)?,
        })
    }

    /// Logical ids and bodies of the resources of a type.
    pub fn resources_of_type<'a>(
        &'a self,
        kind: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
        self.doc["Resources"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(move |(_, r)| r["Type"] == kind)
    }

    /// The template resolved for `stack`: conditions decided, resources whose condition is false
    /// left out, every intrinsic function answered.
    pub fn resolve(&self, stack: &Stack) -> Result<Resolved, TemplateError> {
        resolve::resolve(self, stack)
    }
}

/// `!Tag value` → `{"Fn::Tag": value}` (or `{"Ref": …}`, `{"Condition": …}`); `!GetAtt A.B` →
/// `{"Fn::GetAtt": ["A", "B"]}`.
fn long_form(yaml: serde_yaml_ng::Value) -> Result<Value, TemplateError> {
    use serde_yaml_ng::Value as Y;
    Ok(match yaml {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).map_err(|e| invalid(e.to_string()))?,
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            Value::Array(items.into_iter().map(long_form).collect::<Result<_, _>>()?)
        }
        Y::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = match k {
                    Y::String(s) => s,
                    other => {
                        return Err(invalid(format!(
                            "a mapping key that is not a string: {other:?}"
                        )))
                    }
                };
                out.insert(key, long_form(v)?);
            }
            Value::Object(out)
        }
        Y::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            let tag = tag.trim_start_matches('!').to_owned();
            let value = long_form(tagged.value)?;
            let (name, value) = match tag.as_str() {
                "Ref" | "Condition" => (tag.clone(), value),
                "GetAtt" => match value {
                    Value::String(s) => {
                        let (resource, attribute) = s
                            .split_once('.')
                            .ok_or_else(|| invalid(format!("!GetAtt {s} names no attribute")))?;
                        (
                            "Fn::GetAtt".to_owned(),
                            Value::Array(vec![resource.into(), attribute.into()]),
                        )
                    }
                    other => ("Fn::GetAtt".to_owned(), other),
                },
                _ => (format!("Fn::{tag}"), value),
            };
            let mut out = Map::new();
            out.insert(name, value);
            Value::Object(out)
        }
    })
}

/// The template with every intrinsic answered for one stack.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub resources: BTreeMap<String, Value>,
    pub globals: Value,
    pub outputs: BTreeMap<String, Value>,
    pub parameters: BTreeMap<String, String>,
}

impl Resolved {
    /// The serverless functions (logical id and resolved body).
    pub fn functions(&self) -> impl Iterator<Item = Function<'_>> {
        self.resources
            .iter()
            .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
            .map(|(id, body)| Function {
                logical_id: id,
                body,
                globals: &self.globals["Function"],
            })
    }

    pub fn function(&self, logical_id: &str) -> Result<Function<'_>, TemplateError> {
        self.functions()
            .find(|f| f.logical_id == logical_id)
            .ok_or_else(|| invalid(format!("no function {logical_id} in this stack")))
    }
}

/// One `AWS::Serverless::Function` of a resolved template.
#[derive(Debug, Clone, Copy)]
pub struct Function<'a> {
    pub logical_id: &'a str,
    pub body: &'a Value,
    globals: &'a Value,
}

impl Function<'_> {
    pub fn properties(&self) -> &Value {
        &self.body["Properties"]
    }

    /// A property, or the Globals' value when the function does not set it.
    pub fn property(&self, name: &str) -> &Value {
        match &self.body["Properties"][name] {
            Value::Null => &self.globals[name],
            v => v,
        }
    }

    /// Its environment: the Globals' variables with its own on top.
    pub fn environment(&self) -> Result<BTreeMap<String, String>, TemplateError> {
        let mut env = BTreeMap::new();
        for vars in [
            &self.globals["Environment"]["Variables"],
            &self.body["Properties"]["Environment"]["Variables"],
        ] {
            for (k, v) in vars.as_object().into_iter().flatten() {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => {
                        return Err(invalid(format!(
                            "{}: environment variable {k} is not a string: {other}",
                            self.logical_id
                        )))
                    }
                };
                env.insert(k.clone(), v);
            }
        }
        Ok(env)
    }

    /// The statements of its role's inline policies (`Policies` documents).
    pub fn statements(&self) -> Result<Vec<Statement>, TemplateError> {
        let mut out = Vec::new();
        for policy in self.properties()["Policies"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(statements) = policy["Statement"].as_array() else {
                return Err(invalid(format!(
                    "{}: a policy that is not an inline document ({policy}); SAM policy templates are not modelled",
                    self.logical_id
                )));
            };
            for s in statements {
                out.push(Statement::parse(s).map_err(|why| {
                    invalid(format!("{}: statement {s}: {why}", self.logical_id))
                })?);
            }
        }
        Ok(out)
    }
}

/// One IAM policy statement, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub allow: bool,
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    /// The statement's condition block, if any (statements with one are never matched here: a
    /// test must treat them explicitly).
    pub condition: Option<String>,
}

/// Why a role's policy statement could not be read as a [`Statement`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    #[error("{0} is not a string")]
    NotAString(Value),
    #[error("{0} is neither a string nor a list")]
    NeitherStringNorList(Value),
    /// Its `Effect` is neither `Allow` nor `Deny` (or is missing).
    #[error("Effect {0:?}")]
    UnknownEffect(Option<String>),
    #[error("NotAction/NotResource are not modelled")]
    NegatedActionOrResource,
}

fn strings(v: &Value) -> Result<Vec<String>, StatementError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| StatementError::NotAString(i.clone()))
            })
            .collect(),
        other => Err(StatementError::NeitherStringNorList(other.clone())),
    }
}

impl Statement {
    fn parse(s: &Value) -> Result<Self, StatementError> {
        let allow = match s["Effect"].as_str() {
            Some("Allow") => true,
            Some("Deny") => false,
            other => return Err(StatementError::UnknownEffect(other.map(str::to_owned))),
        };
        if !s["NotAction"].is_null() || !s["NotResource"].is_null() {
            return Err(StatementError::NegatedActionOrResource);
        }
        Ok(Self {
            allow,
            actions: strings(&s["Action"])?,
            resources: strings(&s["Resource"])?,
            condition: (!s["Condition"].is_null()).then(|| s["Condition"].to_string()),
        })
    }

    /// Whether this statement names `action` on `resource` (IAM's matching: actions compare
    /// case-insensitively, `*` matches any run of characters and `?` one, in both).
    pub fn allows(&self, action: &str, resource: &str) -> bool {
        self.allow
            && self.condition.is_none()
            && self
                .actions
                .iter()
                .any(|a| wildcard(&a.to_ascii_lowercase(), &action.to_ascii_lowercase()))
            && self.resources.iter().any(|r| wildcard(r, resource))
    }
}

/// A role held to the calls its function made: what was needed and not granted, and what is
/// granted and was never needed (each as "action on resource").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleCheck {
    pub not_granted: Vec<String>,
    pub unused: Vec<String>,
}

/// A statement [`check_role`] refuses: one with a condition, or a Deny.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a conditioned or Deny statement is not modelled: {0:?}")]
pub struct UnmodelledStatement(pub Statement);

/// Checks `used` (action, resource ARN) pairs against a role's statements, both ways. Statements
/// with a condition or a Deny are refused: they need a check of their own.
pub fn check_role<'a>(
    statements: &[Statement],
    used: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
) -> Result<RoleCheck, UnmodelledStatement> {
    if let Some(s) = statements
        .iter()
        .find(|s| s.condition.is_some() || !s.allow)
    {
        return Err(UnmodelledStatement(s.clone()));
    }
    let mut check = RoleCheck::default();
    for (action, resource) in used.clone() {
        if !statements.iter().any(|s| s.allows(action, resource)) {
            check.not_granted.push(format!("{action} on {resource}"));
        }
    }
    for s in statements {
        for action in &s.actions {
            for pattern in &s.resources {
                let needed = used.clone().into_iter().any(|(a, r)| {
                    wildcard(&action.to_ascii_lowercase(), &a.to_ascii_lowercase())
                        && wildcard(pattern, r)
                });
                if !needed {
                    check.unused.push(format!("{action} on {pattern}"));
                }
            }
        }
    }
    Ok(check)
}

/// IAM's wildcard match: `*` any run of characters (also none), `?` exactly one.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Classic two-pointer match with backtracking to the last star.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_iam_does() {
        assert!(wildcard(
            "arn:aws:s3:::b/logs/*",
            "arn:aws:s3:::b/logs/x/y.json"
        ));
        assert!(wildcard("arn:aws:s3:::b/logs/*", "arn:aws:s3:::b/logs/"));
        assert!(!wildcard("arn:aws:s3:::b/logs/*", "arn:aws:s3:::b/log"));
        assert!(!wildcard("arn:aws:s3:::b", "arn:aws:s3:::b/x"));
        assert!(wildcard("*", "anything"));
        assert!(wildcard("a?c", "abc"));
        assert!(!wildcard("a?c", "ac"));
        assert!(wildcard("*-job*", "arn:x:job-definition/s-job:1"));
    }

    #[test]
    fn short_forms_become_long_forms() {
        let t =
            Template::parse("A: !Ref X\nB: !GetAtt Q.Arn\nC: !Sub \"${X}-y\"\nD: !If [c, 1, 2]\n")
                .unwrap();
        assert_eq!(t.doc["A"], serde_json::json!({"Ref": "X"}));
        assert_eq!(t.doc["B"], serde_json::json!({"Fn::GetAtt": ["Q", "Arn"]}));
        assert_eq!(t.doc["C"], serde_json::json!({"Fn::Sub": "${X}-y"}));
        assert_eq!(t.doc["D"], serde_json::json!({"Fn::If": ["c", 1, 2]}));
    }

    #[test]
    fn a_statement_with_a_condition_or_a_deny_allows_nothing_here() {
        let s = |extra: &str| {
            let t = Template::parse(&format!(
                "S: {{Effect: Allow, Action: 's3:GetObject', Resource: '*' {extra}}}"
            ))
            .unwrap();
            Statement::parse(&t.doc["S"]).unwrap()
        };
        assert!(s("").allows("S3:getobject", "arn:aws:s3:::b/k"));
        assert!(!s(", Condition: {Bool: {x: y}}").allows("s3:GetObject", "arn:aws:s3:::b/k"));
        assert!(!s("").allows("s3:PutObject", "arn:aws:s3:::b/k"));
    }

    #[test]
    fn unreadable_statements_say_why_in_the_same_words() {
        let parsed = |yaml: &str| {
            let t = Template::parse(&format!("S: {yaml}")).unwrap();
            Statement::parse(&t.doc["S"]).map_err(|e| e.to_string())
        };
        assert_eq!(
            parsed("{Effect: Maybe, Action: '*', Resource: '*'}"),
            Err("Effect Some(\"Maybe\")".to_owned())
        );
        assert_eq!(
            parsed("{Effect: Allow, NotAction: '*', Resource: '*'}"),
            Err("NotAction/NotResource are not modelled".to_owned())
        );
        assert_eq!(
            parsed("{Effect: Allow, Action: [1], Resource: '*'}"),
            Err("1 is not a string".to_owned())
        );
        let deny = Statement {
            allow: false,
            actions: vec!["s3:GetObject".into()],
            resources: vec!["*".into()],
            condition: None,
        };
        assert_eq!(
            check_role(std::slice::from_ref(&deny), []).map_err(|e| e.to_string()),
            Err(format!(
                "a conditioned or Deny statement is not modelled: {deny:?}"
            ))
        );
    }
}

//! Answers CloudFormation's intrinsic functions for one stack.

use super::{invalid, Resolved, Template, TemplateError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

mod intrinsic;

/// A stack the template is resolved for: its name, where it is, and parameter values (the
/// template's defaults fill the rest).
#[derive(Debug, Clone)]
pub struct Stack {
    pub name: String,
    pub partition: String,
    pub region: String,
    pub account: String,
    pub parameters: BTreeMap<String, String>,
}

impl Stack {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            partition: "aws".into(),
            region: "us-east-1".into(),
            account: "123456789012".into(),
            parameters: BTreeMap::new(),
        }
    }

    pub fn with(mut self, parameter: &str, value: &str) -> Self {
        self.parameters
            .insert(parameter.to_owned(), value.to_owned());
        self
    }

    fn arn(&self, service: &str, resource: &str) -> String {
        format!(
            "arn:{}:{service}:{}:{}:{resource}",
            self.partition, self.region, self.account
        )
    }
}

struct Resolver<'a> {
    template: &'a Template,
    stack: &'a Stack,
    conditions: BTreeMap<String, bool>,
}

pub(super) fn resolve(template: &Template, stack: &Stack) -> Result<Resolved, TemplateError> {
    let mut r = Resolver {
        template,
        stack,
        conditions: BTreeMap::new(),
    };
    for name in template.doc["Conditions"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
    {
        let value = r.condition(&name)?;
        r.conditions.insert(name, value);
    }
    let mut resources = BTreeMap::new();
    for (id, body) in template.doc["Resources"].as_object().into_iter().flatten() {
        if let Some(c) = body["Condition"].as_str() {
            if !r.condition(c)? {
                continue;
            }
        }
        let resolved = r
            .value(body)
            .map_err(|e| invalid(format!("resource {id}: {e}")))?;
        resources.insert(id.clone(), resolved.unwrap_or(Value::Null));
    }
    let globals = r.value(&template.doc["Globals"])?.unwrap_or(Value::Null);
    let mut outputs = BTreeMap::new();
    for (id, body) in template.doc["Outputs"].as_object().into_iter().flatten() {
        outputs.insert(id.clone(), r.value(&body["Value"])?.unwrap_or(Value::Null));
    }
    let mut parameters = BTreeMap::new();
    for (name, _) in template.doc["Parameters"].as_object().into_iter().flatten() {
        if let Ok(v) = r.parameter(name) {
            parameters.insert(name.clone(), v);
        }
    }
    Ok(Resolved {
        resources,
        globals,
        outputs,
        parameters,
    })
}

fn text(v: &Value) -> Result<String, TemplateError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(invalid(format!("{other} is not a string"))),
    }
}

impl Resolver<'_> {
    fn condition(&self, name: &str) -> Result<bool, TemplateError> {
        if let Some(v) = self.conditions.get(name) {
            return Ok(*v);
        }
        let body = &self.template.doc["Conditions"][name];
        if body.is_null() {
            return Err(invalid(format!("no condition {name}")));
        }
        self.truth(body)
    }

    fn truth(&self, v: &Value) -> Result<bool, TemplateError> {
        let resolved = self.value(v)?.unwrap_or(Value::Null);
        resolved
            .as_bool()
            .ok_or_else(|| invalid(format!("{v} is not a condition")))
    }

    fn parameter(&self, name: &str) -> Result<String, TemplateError> {
        if let Some(v) = self.stack.parameters.get(name) {
            return Ok(v.clone());
        }
        let p = &self.template.doc["Parameters"][name];
        if p.is_null() {
            return Err(invalid(format!("no parameter {name}")));
        }
        match &p["Default"] {
            Value::Null => Err(invalid(format!(
                "parameter {name} has no default and the stack gives no value"
            ))),
            d => text(d),
        }
    }

    fn reference(&self, name: &str) -> Result<Value, TemplateError> {
        let s = self.stack;
        Ok(match name {
            "AWS::StackName" => s.name.clone().into(),
            "AWS::Region" => s.region.clone().into(),
            "AWS::AccountId" => s.account.clone().into(),
            "AWS::Partition" => s.partition.clone().into(),
            "AWS::URLSuffix" => "amazonaws.com".into(),
            "AWS::NoValue" => Value::Null,
            _ if !self.template.doc["Parameters"][name].is_null() => {
                let v = self.parameter(name)?;
                let kind = self.template.doc["Parameters"][name]["Type"]
                    .as_str()
                    .unwrap_or("String");
                if kind.starts_with("List<") || kind == "CommaDelimitedList" {
                    Value::Array(v.split(',').map(|x| x.trim().into()).collect())
                } else {
                    v.into()
                }
            }
            _ => self.attribute(name, "Ref")?,
        })
    }

    /// A resource's `Ref` (attribute "Ref") or `GetAtt` answer: the name or ARN CloudFormation
    /// gives it in this stack.
    fn attribute(&self, id: &str, attribute: &str) -> Result<Value, TemplateError> {
        let body = &self.template.doc["Resources"][id];
        // SAM makes a role `<Function>Role` for a function that names none (AWS SAM Developer
        // Guide, AWS::Serverless::Function, "Role").
        let implicit_role = id.strip_suffix("Role").is_some_and(|f| {
            let function = &self.template.doc["Resources"][f];
            function["Type"] == "AWS::Serverless::Function"
                && function["Properties"]["Role"].is_null()
        });
        let kind = match body["Type"].as_str() {
            Some(kind) => kind,
            None if implicit_role => "AWS::IAM::Role",
            None => return Err(invalid(format!("no resource {id}"))),
        };
        let s = self.stack;
        let physical = format!("{}-{id}", s.name);
        let named = |property: &Value| -> Result<String, TemplateError> {
            match self.value(property)? {
                Some(v) => text(&v),
                None => Ok(physical.clone()),
            }
        };
        let props = &body["Properties"];
        let answer: String = match (kind, attribute) {
            ("AWS::S3::Bucket", "Ref") => physical.to_lowercase(),
            ("AWS::S3::Bucket", "Arn") => {
                format!("arn:{}:s3:::{}", s.partition, physical.to_lowercase())
            }
            ("AWS::SQS::Queue", "Ref" | "QueueUrl") => format!(
                "https://sqs.{}.amazonaws.com/{}/{physical}",
                s.region, s.account
            ),
            ("AWS::SQS::Queue", "Arn") => s.arn("sqs", &physical),
            ("AWS::SQS::Queue", "QueueName") => physical,
            ("AWS::Batch::JobQueue", "Ref" | "JobQueueArn") => {
                s.arn("batch", &format!("job-queue/{physical}"))
            }
            ("AWS::Batch::JobDefinition", "Ref") => s.arn(
                "batch",
                &format!("job-definition/{}:1", named(&props["JobDefinitionName"])?),
            ),
            ("AWS::Batch::ComputeEnvironment", "Ref") => {
                s.arn("batch", &format!("compute-environment/{physical}"))
            }
            ("AWS::Events::Rule", "Ref") => physical,
            ("AWS::Events::Rule", "Arn") => s.arn("events", &format!("rule/{physical}")),
            ("AWS::Events::EventBus", "Ref" | "Name") => named(&props["Name"])?,
            ("AWS::Events::EventBus", "Arn") => {
                s.arn("events", &format!("event-bus/{}", named(&props["Name"])?))
            }
            ("AWS::SNS::Topic", "Ref" | "TopicArn") => s.arn("sns", &physical),
            ("AWS::KMS::Key", "Ref" | "KeyId") => format!("{physical}-key-id"),
            ("AWS::KMS::Key", "Arn") => s.arn("kms", &format!("key/{physical}-key-id")),
            ("AWS::KMS::Alias", "Ref") => named(&props["AliasName"])?,
            ("AWS::IAM::Role", "Ref") => physical,
            ("AWS::IAM::Role", "Arn") => {
                format!("arn:{}:iam::{}:role/{physical}", s.partition, s.account)
            }
            ("AWS::IAM::InstanceProfile", "Ref") => physical,
            ("AWS::IAM::InstanceProfile", "Arn") => format!(
                "arn:{}:iam::{}:instance-profile/{physical}",
                s.partition, s.account
            ),
            ("AWS::Serverless::Function", "Ref") => physical,
            ("AWS::Serverless::Function", "Arn") => {
                s.arn("lambda", &format!("function:{physical}"))
            }
            ("AWS::Logs::LogGroup", "Ref") => named(&props["LogGroupName"])?,
            ("AWS::Logs::LogGroup", "Arn") => s.arn(
                "logs",
                &format!("log-group:{}:*", named(&props["LogGroupName"])?),
            ),
            ("AWS::Glue::Database", "Ref") => named(&props["DatabaseInput"]["Name"])?,
            ("AWS::Athena::WorkGroup", "Ref") => named(&props["Name"])?,
            ("AWS::Glue::Table", "Ref") => named(&props["TableInput"]["Name"])?,
            (_, "Ref") => physical,
            _ => {
                return Err(invalid(format!(
                    "GetAtt {id}.{attribute} ({kind}) is not modelled"
                )))
            }
        };
        Ok(answer.into())
    }

    fn substitute(
        &self,
        template: &str,
        vars: &Map<String, Value>,
    ) -> Result<String, TemplateError> {
        let mut out = String::new();
        let mut rest = template;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            if let Some(literal) = after.strip_prefix('!') {
                // `${!Literal}` is written as `${Literal}`.
                out.push_str("${");
                rest = literal;
                continue;
            }
            let end = after
                .find('}')
                .ok_or_else(|| invalid(format!("unclosed ${{ in {template}")))?;
            let name = &after[..end];
            let value = if let Some(v) = vars.get(name) {
                self.value(v)?.unwrap_or(Value::Null)
            } else if let Some((id, attribute)) = name.split_once('.') {
                self.attribute(id, attribute)?
            } else {
                self.reference(name)?
            };
            out.push_str(&text(&value)?);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value with every intrinsic answered; `None` for `AWS::NoValue` (the key is dropped).
    fn value(&self, v: &Value) -> Result<Option<Value>, TemplateError> {
        let Value::Object(map) = v else {
            return match v {
                Value::Array(items) => {
                    let mut out = Vec::new();
                    for i in items {
                        if let Some(x) = self.value(i)? {
                            out.push(x);
                        }
                    }
                    Ok(Some(Value::Array(out)))
                }
                other => Ok(Some(other.clone())),
            };
        };
        if map.len() == 1 {
            let (k, arg) = map.iter().next().ok_or_else(|| invalid("empty map"))?;
            if let Some(answer) = self.intrinsic(k, arg)? {
                return Ok(answer);
            }
        }
        let mut out = Map::new();
        for (k, x) in map {
            if let Some(x) = self.value(x)? {
                out.insert(k.clone(), x);
            }
        }
        Ok(Some(Value::Object(out)))
    }

    fn list(&self, arg: &Value, n: usize, what: &str) -> Result<Vec<Value>, TemplateError> {
        match arg {
            Value::Array(items) if items.len() == n => Ok(items.clone()),
            _ => Err(invalid(format!("{what} takes {n} arguments: {arg}"))),
        }
    }

    fn resolved(&self, v: &Value) -> Result<Value, TemplateError> {
        Ok(self.value(v)?.unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = r#"
Parameters:
  Url: {Type: String, Default: ""}
  Names: {Type: CommaDelimitedList, Default: "a,b"}
Conditions:
  HasS3: !Equals [!Select [0, !Split ["://", !Ref Url]], "s3"]
Resources:
  Bucket: {Type: AWS::S3::Bucket}
  Q: {Type: AWS::SQS::Queue}
  OnlyS3:
    Type: AWS::SQS::Queue
    Condition: HasS3
  Def:
    Type: AWS::Batch::JobDefinition
    Properties: {JobDefinitionName: !Sub "${AWS::StackName}-job"}
  Uses:
    Type: Thing
    Properties:
      A: !Sub "${Bucket.Arn}/logs/*"
      B: !GetAtt Q.Arn
      C: !Ref Def
      D: !If [HasS3, !Sub ["arn:${AWS::Partition}:s3:::${Path}*", {Path: !Select [1, !Split ["s3://", !Ref Url]]}], !Ref AWS::NoValue]
      E: !Join [",", !Ref Names]
"#;

    #[test]
    fn intrinsics_resolve_for_the_stack() {
        let t = Template::parse(T).unwrap();
        let s3 = t
            .resolve(&Stack::new("st").with("Url", "s3://src/in/"))
            .unwrap();
        let p = &s3.resources["Uses"]["Properties"];
        assert_eq!(p["A"], "arn:aws:s3:::st-bucket/logs/*");
        assert_eq!(p["B"], "arn:aws:sqs:us-east-1:123456789012:st-Q");
        assert_eq!(
            p["C"],
            "arn:aws:batch:us-east-1:123456789012:job-definition/st-job:1"
        );
        assert_eq!(p["D"], "arn:aws:s3:::src/in/*");
        assert_eq!(p["E"], "a,b");
        assert!(s3.resources.contains_key("OnlyS3"));

        let http = t
            .resolve(&Stack::new("st").with("Url", "https://x/"))
            .unwrap();
        assert!(http.resources["Uses"]["Properties"].get("D").is_none());
        assert!(!http.resources.contains_key("OnlyS3"));
    }

    #[test]
    fn an_unmodelled_function_is_an_error_not_a_pass() {
        let t = Template::parse("Resources:\n  X: {Type: T, Properties: {A: !Cidr [x, 1, 2]}}\n")
            .unwrap();
        assert!(t.resolve(&Stack::new("s")).is_err());
    }
}

//! CloudFormation's intrinsic functions (`Ref`, `Fn::GetAtt`, `Fn::Sub`, …) answered for a stack.

use super::{invalid, text, Resolver, TemplateError};
use serde_json::{Map, Value};

impl Resolver<'_> {
    /// `Some(answer)` when `name` is an intrinsic function, `None` for an ordinary key.
    #[allow(clippy::type_complexity)]
    pub(super) fn intrinsic(
        &self,
        name: &str,
        arg: &Value,
    ) -> Result<Option<Option<Value>>, TemplateError> {
        let answer = match name {
            "Ref" => {
                let target = text(arg)?;
                if target == "AWS::NoValue" {
                    return Ok(Some(None));
                }
                self.reference(&target)?
            }
            "Fn::GetAtt" => {
                let parts = self.list(arg, 2, "Fn::GetAtt")?;
                self.attribute(&text(&parts[0])?, &text(&parts[1])?)?
            }
            "Fn::Sub" => self.sub(arg)?,
            "Fn::Join" => self.join(arg)?,
            "Fn::Split" => {
                let parts = self.list(arg, 2, "Fn::Split")?;
                let separator = text(&parts[0])?;
                let whole = text(&self.resolved(&parts[1])?)?;
                Value::Array(whole.split(&separator).map(|s| s.into()).collect())
            }
            "Fn::Select" => self.select(arg)?,
            "Fn::If" => {
                let parts = self.list(arg, 3, "Fn::If")?;
                let branch = if self.condition(&text(&parts[0])?)? {
                    &parts[1]
                } else {
                    &parts[2]
                };
                return Ok(Some(self.value(branch)?));
            }
            "Fn::Equals" => {
                let parts = self.list(arg, 2, "Fn::Equals")?;
                let a = self.resolved(&parts[0])?;
                let b = self.resolved(&parts[1])?;
                Value::Bool(text(&a).ok() == text(&b).ok() && a.is_string() == b.is_string())
            }
            "Fn::Not" => {
                let parts = self.list(arg, 1, "Fn::Not")?;
                Value::Bool(!self.truth(&parts[0])?)
            }
            "Fn::And" | "Fn::Or" => self.and_or(name, arg)?,
            "Condition" => Value::Bool(self.condition(&text(arg)?)?),
            "Fn::Base64" => {
                use base64::Engine;
                let plain = text(&self.resolved(arg)?)?;
                base64::engine::general_purpose::STANDARD
                    .encode(plain.as_bytes())
                    .into()
            }
            other if other.starts_with("Fn::") => {
                return Err(invalid(format!("{other} is not modelled")))
            }
            _ => return Ok(None),
        };
        Ok(Some(Some(answer)))
    }

    /// `Fn::Sub`: a string's `${…}` substituted, with variables of its own when given a pair.
    fn sub(&self, arg: &Value) -> Result<Value, TemplateError> {
        Ok(match arg {
            Value::String(s) => self.substitute(s, &Map::new())?.into(),
            Value::Array(parts) if parts.len() == 2 => {
                let vars = parts[1]
                    .as_object()
                    .ok_or_else(|| invalid("Fn::Sub's variables are not a map"))?;
                self.substitute(&text(&parts[0])?, vars)?.into()
            }
            other => return Err(invalid(format!("Fn::Sub {other}"))),
        })
    }

    /// `Fn::Join`: a list's strings joined by a separator.
    fn join(&self, arg: &Value) -> Result<Value, TemplateError> {
        let parts = self.list(arg, 2, "Fn::Join")?;
        let separator = text(&parts[0])?;
        let items = self.resolved(&parts[1])?;
        let items = items
            .as_array()
            .ok_or_else(|| invalid("Fn::Join's items are not a list"))?
            .iter()
            .map(text)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(items.join(&separator).into())
    }

    /// `Fn::Select`: a list's item at an index.
    fn select(&self, arg: &Value) -> Result<Value, TemplateError> {
        let parts = self.list(arg, 2, "Fn::Select")?;
        let index: usize = text(&self.resolved(&parts[0])?)?
            .parse()
            .map_err(|_| invalid("Fn::Select index"))?;
        let items = self.resolved(&parts[1])?;
        items
            .as_array()
            .and_then(|a| a.get(index))
            .cloned()
            .ok_or_else(|| invalid(format!("Fn::Select {index} of {items}")))
    }

    /// `Fn::And` or `Fn::Or` (`name`) of a list of conditions.
    fn and_or(&self, name: &str, arg: &Value) -> Result<Value, TemplateError> {
        let items = arg
            .as_array()
            .ok_or_else(|| invalid(format!("{name} takes a list")))?;
        let truths = items
            .iter()
            .map(|i| self.truth(i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Bool(if name == "Fn::And" {
            truths.iter().all(|t| *t)
        } else {
            truths.iter().any(|t| *t)
        }))
    }
}

//! A `GRANARY_PRODUCT_KEYS` template read both ways: the key a granule's product must have
//! (re-validation's rule, `handlers::importer::validate`), and the granule a listed key belongs
//! to. `{id}` is the granule id; `{name}` its file name, which for an inventory's granule is the
//! id too.

use regex::Regex;

#[derive(Debug, Clone)]
pub struct ProductTemplate {
    pub template: String,
    /// Where to list: the template's text before its first placeholder.
    pub prefix: String,
    pattern: Regex,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("product key template {template:?}: {why}")]
pub struct BadProductTemplate {
    pub template: String,
    pub why: &'static str,
}

impl ProductTemplate {
    pub fn parse(template: &str) -> Result<Self, BadProductTemplate> {
        let bad = |why| BadProductTemplate {
            template: template.to_owned(),
            why,
        };
        if !template.contains("{id}") {
            return Err(bad("has no {id}, so no key says whose product it is"));
        }
        let mut pattern = String::from("^");
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            pattern.push_str(&regex::escape(&rest[..open]));
            let tail = &rest[open..];
            if let Some(t) = tail.strip_prefix("{id}") {
                // One path segment, shortest first: a separator after it ends it.
                pattern.push_str("(?P<id>[^/]+?)");
                rest = t;
            } else if let Some(t) = tail.strip_prefix("{name}") {
                pattern.push_str("[^/]+?");
                rest = t;
            } else {
                return Err(bad("names a placeholder other than {id} and {name}"));
            }
        }
        pattern.push_str(&regex::escape(rest));
        pattern.push('$');
        if pattern.matches("(?P<id>").count() > 1 {
            return Err(bad("names {id} twice"));
        }
        let prefix = template[..template.find('{').unwrap_or(template.len())].to_owned();
        let pattern = Regex::new(&pattern).map_err(|_| bad("is not a pattern a key can match"))?;
        Ok(Self {
            template: template.to_owned(),
            prefix,
            pattern,
        })
    }

    /// The key an inventory granule's product has.
    pub fn key_of(&self, granule_id: &str) -> String {
        self.template
            .replace("{id}", granule_id)
            .replace("{name}", granule_id)
    }

    /// The granule a listed key is a product of, if the template can have made it.
    pub fn granule_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        self.pattern
            .captures(key)
            .and_then(|c| c.name("id"))
            .map(|m| m.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_maps_granules_to_keys_and_keys_back() {
        let t = ProductTemplate::parse("products/{id}/{name}.tif").unwrap();
        assert_eq!(t.prefix, "products/");
        assert_eq!(t.key_of("G1"), "products/G1/G1.tif");
        assert_eq!(t.granule_of("products/G1/G1.tif"), Some("G1"));
        assert_eq!(t.granule_of("products/G1/G1_v2.tif"), Some("G1"));
        assert_eq!(t.granule_of("products/G1.tif"), None);
        assert_eq!(t.granule_of("other/G1/G1.tif"), None);
        let flat = ProductTemplate::parse("products/{id}.tif").unwrap();
        assert_eq!(
            flat.granule_of("products/HLS.S30.T1.v2.0.tif"),
            Some("HLS.S30.T1.v2.0")
        );
    }

    #[test]
    fn a_template_without_an_id_or_with_an_unknown_placeholder_is_refused() {
        for t in [
            "products/{name}.tif",
            "products/{id}/{date}.tif",
            "p/{id}/{id}.tif",
        ] {
            assert!(ProductTemplate::parse(t).is_err(), "{t}");
        }
    }
}

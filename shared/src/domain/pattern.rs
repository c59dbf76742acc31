//! Regular expressions compiled once per process and pattern. A Lambda builds its configuration
//! once, but every `Ctx` a test, a bench or the local runtime builds compiles the same handful of
//! patterns again, and compiling one costs far more than matching with it (a crash harness spent
//! most of its time there). A compiled [`Regex`] is a cheap, shared clone.

use regex::Regex;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// Patterns seen so far; bounded by the distinct patterns a process configures (a handful).
static COMPILED: LazyLock<Mutex<HashMap<String, Regex>>> = LazyLock::new(Default::default);

/// `pattern` compiled, from the cache when it was compiled before. Errors are not cached.
pub fn compiled(pattern: &str) -> Result<Regex, regex::Error> {
    // A poisoned lock only means another thread panicked while holding it; the map stays valid.
    let mut cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(re) = cache.get(pattern) {
        return Ok(re.clone());
    }
    let re = Regex::new(pattern)?;
    cache.insert(pattern.to_owned(), re.clone());
    Ok(re)
}

#[cfg(test)]
mod tests {
    use super::compiled;

    #[test]
    fn a_pattern_compiles_once_and_matches_the_same_and_a_bad_one_is_an_error_each_time() {
        let a = compiled("^g[0-9]+$").unwrap();
        let b = compiled("^g[0-9]+$").unwrap();
        assert!(a.is_match("g12") && b.is_match("g12") && !b.is_match("x"));
        assert_eq!(a.as_str(), b.as_str());
        assert!(compiled("(").is_err());
        assert!(compiled("(").is_err());
    }
}

//! Percent-encoding, the one way granary writes and reads it: URLs' paths (a file's name in a
//! link, S3's CopySource), EZID's ANVL, and key segments made from a depositor's text.

/// `text` with every byte `keep` refuses written `%XX` (uppercase hex).
pub fn encode(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// RFC 3986's unreserved characters: letters, digits, `-`, `.`, `_`, `~`.
pub fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `%XX` sequences decoded (a `%` not followed by two hex digits stays as it is); bytes that are
/// not UTF-8 afterwards are replaced, never an error.
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_what_is_not_kept_and_decodes_it_back() {
        let e = encode("a b/ü%", |b| unreserved(b) || b == b'/');
        assert_eq!(e, "a%20b/%C3%BC%25");
        assert_eq!(decode(&e), "a b/ü%");
        assert_eq!(decode("5%"), "5%");
        assert_eq!(decode("%zz%4"), "%zz%4");
    }
}

//! librdkafka client properties from a file: how every fleet binary takes
//! connection settings it cannot put on a command line, such as
//! `sasl.password` or `ssl.key.password` mounted from a Kubernetes Secret.
//!
//! The format is Java-properties-like and what Kafka's own tools read:
//! one `key=value` per line, `#` or `!` starts a comment line, blank lines
//! are skipped, whitespace around key and value is trimmed. Values may
//! contain `=`. Errors name the line, never its value (it may be a secret).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct PropertiesError {
    pub line: usize,
    pub problem: &'static str,
}

/// One `key=value` (a `--kafka-property` argument). The error does not
/// echo the argument: it may hold a password.
pub fn parse_pair(raw: &str) -> Result<(String, String), &'static str> {
    let (key, value) = raw.split_once('=').ok_or("expected key=value")?;
    let key = key.trim();
    if key.is_empty() {
        return Err("the key is empty");
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

/// Parses the text of a properties file into (key, value) pairs, in order.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, PropertiesError> {
    let mut properties = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        properties.push(parse_pair(line).map_err(|problem| PropertiesError { line: index + 1, problem })?);
    }
    Ok(properties)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pairs_and_skips_comments_and_blanks() {
        let text = "# SASL\nsecurity.protocol = SASL_SSL\n\n! also a comment\nsasl.password=a=b=c\n";
        let parsed = parse(text).unwrap();
        assert_eq!(
            parsed,
            vec![("security.protocol".into(), "SASL_SSL".into()), ("sasl.password".into(), "a=b=c".into())]
        );
    }

    #[test]
    fn an_error_names_the_line_but_not_its_content() {
        let err = parse("a=1\nsecret-without-equals\n").unwrap_err();
        assert_eq!(err, PropertiesError { line: 2, problem: "expected key=value" });
        assert!(!err.to_string().contains("secret"));
        assert_eq!(parse("=x").unwrap_err().problem, "the key is empty");
    }
}

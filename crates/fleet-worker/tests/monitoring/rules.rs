//! The shipped alert rules at test speed: every duration of minutes in
//! their waits and expressions read as seconds, so a rule that waits ten
//! minutes fires in ten seconds, with nothing else in the file changed.
//! Apart from the live test so that the rewriting is tested on its own.

/// `rules` with every duration of minutes read as seconds, in `for:` (and
/// `keep_firing_for:`) values and in expressions (`expr:` on one line or as
/// a block), nowhere else; returns the text and how many it changed.
pub fn minutes_as_seconds(rules: &str) -> (String, usize) {
    let mut out = String::with_capacity(rules.len());
    let mut changed = 0;
    // Inside an `expr: |` block: the indentation of its `expr:` key.
    let mut block_key_indent: Option<usize> = None;
    for line in rules.split_inclusive('\n') {
        let key = line.trim_start();
        let indent = line.len() - key.len();
        if let Some(key_indent) = block_key_indent {
            if key.trim().is_empty() || indent > key_indent {
                let (scaled, n) = durations_as_seconds(line);
                out.push_str(&scaled);
                changed += n;
                continue;
            }
            block_key_indent = None;
        }
        if key.strip_prefix("expr:").is_some_and(|value| value.trim_start().starts_with(['|', '>'])) {
            block_key_indent = Some(indent);
            out.push_str(line);
        } else if key.starts_with("expr:") || key.starts_with("for:") || key.starts_with("keep_firing_for:") {
            let (scaled, n) = durations_as_seconds(line);
            out.push_str(&scaled);
            changed += n;
        } else {
            out.push_str(line);
        }
    }
    (out, changed)
}

/// Every duration literal of minutes in `text` (digits that do not end a
/// name or a decimal, then `m` not followed by a letter, digit or `_`:
/// `10m`, `[10m:1m]`, not `10ms`, `e2e`, `0.02`) with `s` for its unit.
fn durations_as_seconds(text: &str) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    let part_of_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut changed = 0;
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() && (i == 0 || !part_of_word(chars[i - 1])) {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            out.extend(&chars[start..i]);
            let minutes = chars.get(i) == Some(&'m') && !chars.get(i + 1).is_some_and(|&next| part_of_word(next));
            if minutes {
                out.push('s');
                changed += 1;
                i += 1;
            }
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    (out, changed)
}

/// The names of the alerting rules in a rule file (`- alert: Name` lines).
pub fn alert_names(rules: &str) -> Vec<String> {
    rules.lines().filter_map(|l| l.trim_start().strip_prefix("- alert:")).map(|name| name.trim().to_owned()).collect()
}

#[test]
fn durations_of_minutes_become_seconds_and_nothing_else_changes() {
    let rules = "\
  - alert: A
    # not in a comment: 10m
    expr: |
      deriv(x[10m:1m]) > 0 and y offset 30m > 1000
      and rate(e2e_total[5m]) > 0.02
    for: 10m
    labels:
      window: 10m
  - alert: B
    expr: rate(z[15m]) > 10ms
    for: 5m
";
    let (scaled, changed) = minutes_as_seconds(rules);
    assert_eq!(
        scaled,
        "\
  - alert: A
    # not in a comment: 10m
    expr: |
      deriv(x[10s:1s]) > 0 and y offset 30s > 1000
      and rate(e2e_total[5s]) > 0.02
    for: 10s
    labels:
      window: 10m
  - alert: B
    expr: rate(z[15s]) > 10ms
    for: 5s
"
    );
    assert_eq!(changed, 7);
}

//! A file's lines, one at a time and numbered as editors number them, never
//! the whole file and never more than the longest line a message can carry:
//! a backfill file may be larger than memory.

use std::io::{self, BufRead, Read};

/// The longest line read whole: the longest text plus room for JSONL's
/// quoting. A longer line is skipped (read past, never held) and reported.
pub const MAX_LINE_BYTES: usize = fleet_proto::limits::MAX_MESSAGE_BYTES as usize;

/// One line of the file as read: its 1-based number (as editors show it) and
/// its bytes without the line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLine {
    pub number: u64,
    pub bytes: Vec<u8>,
    /// The line was longer than [`MAX_LINE_BYTES`]: `bytes` is empty, the
    /// line was read past.
    pub too_long: bool,
}

/// A reader's lines, numbered from 1, each without its `\n` or `\r\n`, and
/// how many bytes have been read so far (for a progress bar). Holds at most
/// one line, and of a line longer than [`MAX_LINE_BYTES`] not even that.
pub struct NumberedLines<R> {
    reader: R,
    last_number: u64,
    bytes_read: u64,
    max_line_bytes: usize,
}

impl<R: BufRead> NumberedLines<R> {
    pub fn new(reader: R) -> Self {
        Self::with_max_line_bytes(reader, MAX_LINE_BYTES)
    }

    fn with_max_line_bytes(reader: R, max_line_bytes: usize) -> Self {
        Self { reader, last_number: 0, bytes_read: 0, max_line_bytes }
    }

    /// Bytes of the file consumed so far, line endings included.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn read_line(&mut self) -> io::Result<Option<RawLine>> {
        let mut bytes = Vec::new();
        // One byte over the limit tells a line at the limit from a longer one.
        let limit = self.max_line_bytes as u64 + 1;
        let read = (&mut self.reader).take(limit).read_until(b'\n', &mut bytes)?;
        if read == 0 {
            return Ok(None);
        }
        self.bytes_read += read as u64;
        self.last_number += 1;
        let ended = bytes.last() == Some(&b'\n');
        if ended {
            bytes.pop();
        }
        if !ended && read as u64 == limit {
            self.bytes_read += self.skip_rest_of_line()?;
            return Ok(Some(RawLine { number: self.last_number, bytes: Vec::new(), too_long: true }));
        }
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        Ok(Some(RawLine { number: self.last_number, bytes, too_long: false }))
    }

    /// Reads past the rest of an over-long line, through its `\n`, holding
    /// no more than the reader's buffer. Returns the bytes consumed.
    fn skip_rest_of_line(&mut self) -> io::Result<u64> {
        let mut skipped = 0u64;
        loop {
            let buffer = self.reader.fill_buf()?;
            if buffer.is_empty() {
                return Ok(skipped);
            }
            let (consumed, ended) = match buffer.iter().position(|&b| b == b'\n') {
                Some(newline) => (newline + 1, true),
                None => (buffer.len(), false),
            };
            self.reader.consume(consumed);
            skipped += consumed as u64;
            if ended {
                return Ok(skipped);
            }
        }
    }
}

impl<R: BufRead> Iterator for NumberedLines<R> {
    type Item = io::Result<RawLine>;

    fn next(&mut self) -> Option<Self::Item> {
        self.read_line().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bulk_file::tests::{job, line};
    use crate::bulk_file::{parse_line, LineError, LineFormat};

    fn lines_of(file: &[u8], max_line_bytes: usize) -> Vec<RawLine> {
        NumberedLines::with_max_line_bytes(file, max_line_bytes).map(Result::unwrap).collect()
    }

    #[test]
    fn lines_are_numbered_from_one_blank_ones_included_without_their_endings() {
        let file = b"first\r\n\nthird\nlast without newline";
        let lines = lines_of(file, 100);
        let seen: Vec<(u64, &[u8])> = lines.iter().map(|l| (l.number, l.bytes.as_slice())).collect();
        assert_eq!(seen, [(1, &b"first"[..]), (2, &b""[..]), (3, &b"third"[..]), (4, &b"last without newline"[..])]);
        let mut reader = NumberedLines::new(&file[..]);
        reader.by_ref().for_each(drop);
        assert_eq!(reader.bytes_read(), file.len() as u64);
    }

    #[test]
    fn an_over_long_line_is_read_past_and_the_next_keeps_its_number() {
        let file = b"short\nfar too long for the limit\nafter\n";
        let lines = lines_of(file, 10);
        assert_eq!(lines[0], line(1, "short"));
        assert_eq!(lines[1], RawLine { number: 2, bytes: Vec::new(), too_long: true });
        assert_eq!(lines[2], line(3, "after"));
        assert_eq!(lines.len(), 3);
        // A line exactly at the limit is whole.
        assert_eq!(lines_of(b"0123456789\nx", 10)[0], line(1, "0123456789"));
        assert_eq!(parse_line(LineFormat::Text, &job(), &lines[1]), Err(LineError::TooLong));
    }
}

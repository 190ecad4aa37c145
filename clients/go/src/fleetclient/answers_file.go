// The file Collect writes: one JSON line per request, read back on a resume
// so that each request is written once.

package fleetclient

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"encoding/json"
)

// lineOf is the input line a request id names when it was made from one
// (<job>-<n>, as SendJob and fleet-produce bulk make them); nil for any
// other id.
func lineOf(job, id string) *uint64 {
	if !strings.HasPrefix(id, job+"-") {
		return nil
	}
	rest := id[len(job)+1:]
	for _, b := range []byte(rest) {
		if b < '0' || b > '9' {
			return nil
		}
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// collectedLine is one line of a collected job.
type collectedLine struct {
	RequestID string          `json:"request_id"`
	Line      *uint64         `json:"line"`
	Status    string          `json:"status"`
	Answer    json.RawMessage `json:"answer"`
}

// answerLine holds the answer as the worker wrote it when it is JSON, as a
// string when not.
func answerLine(job, id, status string, value []byte) collectedLine {
	answer := json.RawMessage(value)
	if !json.Valid(value) {
		answer, _ = json.Marshal(string(value))
	}
	return collectedLine{RequestID: id, Line: lineOf(job, id), Status: status, Answer: answer}
}

// openAnswersFile opens a JSON lines file of collected answers for
// appending: the requests it holds already (request id -> status) and the
// file. A last line without its newline (a collector killed while writing
// it) is cut off; a line that is not a collected answer is an error (it is
// not such a file).
func openAnswersFile(path string) (map[string]string, *os.File, error) {
	held := map[string]string{}
	var whole int64
	existing, err := os.Open(path)
	switch {
	case err == nil:
		defer existing.Close()
		reader := bufio.NewReader(existing)
		for number := 1; ; number++ {
			raw, err := reader.ReadBytes('\n')
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, nil, err
			}
			var entry struct {
				RequestID *string `json:"request_id"`
				Status    string  `json:"status"`
			}
			reason := "no request_id, or no known status"
			if err := json.Unmarshal(raw, &entry); err != nil {
				reason = err.Error()
			} else if entry.RequestID != nil && isStatus(entry.Status) {
				reason = ""
			}
			if reason != "" {
				return nil, nil, fmt.Errorf("%s: line %d is not a collected answer (%s); is this another file?",
					path, number, reason)
			}
			if held[*entry.RequestID] == "" {
				held[*entry.RequestID] = entry.Status
			}
			whole += int64(len(raw))
		}
	case !os.IsNotExist(err):
		return nil, nil, err
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := out.Truncate(whole); err != nil {
		out.Close()
		return nil, nil, err
	}
	return held, out, nil
}
